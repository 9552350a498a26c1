// Package controller is the example operator's ConfigMap reconciler. It
// manages a Kubernetes finalizer on ConfigMaps labelled gcprobe-demo=true,
// and it has two planted bugs for gcprobe to find: a Go finalizer leak in
// its reconcile path (remember), and one object whose deletion it refuses,
// so that it stays Terminating.
package controller
