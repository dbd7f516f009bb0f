// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3), built at the version
// kube-apiserver's module graph pins, for tools/real-apiserver and the tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
