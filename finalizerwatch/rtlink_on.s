//go:build gcprobe_runtime

// This file is empty on purpose. A package with an assembly file may
// declare a function without a body, which rtlink_on.go does for
// runtime.gcprobePatchedRuntime: defined only by the runtime that
// finalizercheck -runtime patches, so that a build with the
// gcprobe_runtime tag and another runtime fails to link.
