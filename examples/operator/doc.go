// Command operator is a small controller-runtime operator that embeds
// gcprobe the recommended way, and plants two bugs for it to find:
//
//   - a Go finalizer leak in its reconcile path (internal/controller,
//     the line marked "marker: operator-leak"): the registering line shows
//     in gcprobe_finalizers_outstanding{site=...} and
//     gcprobe_finalizers_suspect_objects on /metrics, and in the profile at
//     /debug/pprof/finalizers;
//   - a Kubernetes finalizer it never removes from a ConfigMap annotated
//     gcprobe.dev/fail-deletion=true, which stays Terminating: it shows in
//     gcprobe_k8s_terminating_objects and in a log line naming it.
//
// It reconciles ConfigMaps labelled gcprobe-demo=true, adding the
// finalizer example.gcprobe.dev/cleanup and removing it on deletion. The
// metrics server is controller-runtime's secure one: HTTPS, with every
// request authenticated (TokenReview) and authorized (SubjectAccessReview)
// against the cluster. config/ deploys it (kustomize: namespace, RBAC, a
// metrics-reader ServiceAccount, Deployment, metrics Service, an optional
// ServiceMonitor) from the image Dockerfile builds; see README.md.
//
//	kubectl apply -k examples/operator/config/default
//
// or, out of a cluster, from this directory (a module of its own):
//
//	go run . --kubeconfig ~/.kube/config
package main
