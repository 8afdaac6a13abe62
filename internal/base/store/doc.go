// Package store owns every SQL statement sendonce runs on its own tables
// (sendonce_*) and on River's (river_*): the intent's row and everything
// beside it. Each statement is a named constant beside the Go function that
// runs it; package outbox, package webhook, the worker's engine
// (internal/engine/sendstate), package worker and the operator surfaces
// call those functions and hold no SQL of their own on these tables.
// TestOneOwner (internal/checks/oneowner) holds it.
//
// The functions take a DB (a pool, a connection or a transaction: the
// caller decides the transaction) and return plain rows (Intent); the
// packages above turn them into their own types. The intent's states and
// the statements that move it between them are listed in docs/states.md.
package store
