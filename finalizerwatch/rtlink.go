package finalizerwatch

import "unsafe"

// This file links the ledger to the runtime's hooks in the runtime build
// mode, and is the stub that says there are none otherwise:
// finalizercheck -runtime writes the linked version, which its overlay
// puts in this file's place (its build cannot be told apart from this one
// by anything but the overlay, so the user's build tags are untouched).
// The marker below is what finalizercheck checks before it replaces this
// file: keep it.
//
// gcprobe:rtlink stub

// rtLinked reports whether the runtime's hooks are linked: false here.
func rtLinked() bool { return false }

// rtStore sets the runtime's hook table: nothing to set here.
func rtStore(unsafe.Pointer) {}
