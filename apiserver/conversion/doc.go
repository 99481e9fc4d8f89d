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
// the hub has no place for is kept aside in the
// OlderVersionFieldsAnnotation of the stored object and given back when it
// is read at that version (Spoke.Own), where Deckhouse drops it; each
// kind's file documents what a round trip changes, and the fuzz tests
// hold it to exactly that.
package conversion
