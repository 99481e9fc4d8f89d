// Package conversion converts deckhouse.io objects between the versions
// of their kind that node-manager serves: every version Deckhouse serves,
// so that manifests and stored objects of a Deckhouse cluster keep
// working. kube-apiserver calls it through the CRDs' conversion webhook
// (webhook.go), served by bashible-apiserver.
//
// Each kind has a hub (its storage version) and spokes (every other
// served version). A spoke converts up to the hub and down from it; two
// spokes convert through the hub. Going down, what the spoke cannot hold
// is kept in the ConversionDataAnnotation and restored going up, so a
// round trip through an older version loses nothing. Going up, a field
// the newer version dropped is lost, as in Deckhouse; each kind's file
// documents its losses, and the fuzz tests hold them to exactly that.
package conversion
