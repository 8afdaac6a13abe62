//go:build !linux

package demo

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal; the demo's cleanup stops its workers.
func setParentDeathSignal(*syscall.SysProcAttr) {}
