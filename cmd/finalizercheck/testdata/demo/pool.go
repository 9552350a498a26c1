package main

import "runtime"

type conn struct {
	id  int
	buf [64]byte
}

func (c *conn) close() {}

// pool keeps every connection it dials: their finalizers stay registered.
var pool []*conn

func dial(id int) *conn {
	c := &conn{id: id}
	runtime.SetFinalizer(c, (*conn).close) // marker: dial
	pool = append(pool, c)
	return c
}

type buffer struct {
	handle int
	buf    [64]byte
}

func newBuffer(h int) *buffer {
	b := &buffer{handle: h}
	runtime.AddCleanup(b, func(int) {}, h) // marker: buffer
	return b
}
