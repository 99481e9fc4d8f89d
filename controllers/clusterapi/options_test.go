package clusterapi

import (
	"strings"
	"testing"
)

func TestCloudOptionsAreChecked(t *testing.T) {
	const template = "awsmachinetemplates.v1beta2.infrastructure.cluster.x-k8s.io"
	with := func(f func(*Options)) Options {
		o := NewOptions()
		o.Enabled = true
		f(&o)
		return o
	}
	cloud := func(o *Options) {
		o.CloudCluster, o.CloudMachineTemplate, o.CloudZones = "aws", template, []string{"a"}
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" for valid
	}{
		{"no cloud", with(func(*Options) {}), ""},
		{"a cloud", with(cloud), ""},
		{"a cloud without Cluster API", with(func(o *Options) { cloud(o); o.Enabled = false }), "--cloud-cluster needs --cluster-api"},
		{"zones without a cloud", with(func(o *Options) { o.CloudZones = []string{"a"} }), "need --cloud-cluster"},
		{"no template", with(func(o *Options) { o.CloudCluster = "aws" }), "resource.version.group"},
		{"a template without its version", with(func(o *Options) { o.CloudCluster, o.CloudMachineTemplate = "aws", "awsmachinetemplates" }), "resource.version.group"},
		{"a lost machine replaced at once", with(func(o *Options) { cloud(o); o.MachineLostAfter = 0 }), "at least 1s"},
	} {
		err := tc.o.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	gvr, _ := (&Options{CloudMachineTemplate: template}).templateResource()
	if gvr.Resource != "awsmachinetemplates" || gvr.Version != "v1beta2" || gvr.Group != "infrastructure.cluster.x-k8s.io" {
		t.Errorf("parsed %v", gvr)
	}
}
