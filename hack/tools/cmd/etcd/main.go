// Command etcd is the etcd server at the version pinned in this module,
// built from go.etcd.io/etcd/server/v3 for the local control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
