// Package other is a non-standard import.
package other

// Name is used.
const Name = "other"
