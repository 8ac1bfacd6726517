// etcd's own entry point, built from the module proxy (no release tarball is reachable here).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
