// Package templates renders the shell that node-manager's nodes run: the
// node agent bashible.sh, the first-boot bootstrap script, and each node
// group's bundle of steps, from the built-in template tree (tree/, embedded
// in the binary; Builtin, Overlay) and the users' NodeGroupConfigurations.
//
// Tree.Render (render.go) takes one group's Context (context.go, built from
// live cluster state by NewContext in new_context.go; every field a
// template may read is in it, and a missing key is an error, never
// "<no value>") and the group's NodeGroupConfigurations as CustomSteps,
// runs the engine (engine.go: text/template with sprig, strict and
// bounded), parses every rendered script as bash before it can be served
// (script_check.go), and gives the group's Bundle with its configuration
// checksum (Checksum). Each template text is parsed once and its parsed set
// reused (compiled.go). NodeGroupConfigurations are untrusted: a tree given
// an Untrusted renderer (WithSandbox, untrusted.go) renders them through it,
// and bashible-apiserver gives it the worker processes of templates/sandbox,
// bounded in CPU and memory.
//
// StepDisruption (disruption.go) is the one definition of a disruptive
// step change, which the preview reports. The version map of what nodes
// install is versions.yaml (versions.go); cluster-wide settings are read in
// cluster_settings.go.
//
// templates/README.md documents the tree, the render context field by
// field, what the renderer refuses and the golden files;
// templates/AUTHORING.md is the guide for NodeGroupConfiguration authors.
package templates
