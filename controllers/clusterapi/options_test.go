package clusterapi

import (
	"strings"
	"testing"
)

func TestCloudOptionsAreChecked(t *testing.T) {
	const template = "awsmachinetemplates.v1beta2.infrastructure.cluster.x-k8s.io"
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" for valid
	}{
		{"no cloud", Options{Enabled: true}, ""},
		{"a cloud", Options{Enabled: true, CloudCluster: "aws", CloudMachineTemplate: template, CloudZones: []string{"a"}}, ""},
		{"a cloud without Cluster API", Options{CloudCluster: "aws", CloudMachineTemplate: template}, "--cloud-cluster needs --cluster-api"},
		{"zones without a cloud", Options{Enabled: true, CloudZones: []string{"a"}}, "need --cloud-cluster"},
		{"no template", Options{Enabled: true, CloudCluster: "aws"}, "resource.version.group"},
		{"a template without its version", Options{Enabled: true, CloudCluster: "aws", CloudMachineTemplate: "awsmachinetemplates"}, "resource.version.group"},
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
