//go:build !linux

package integration

import "syscall"

// procAttr puts a process in a group of its own, so a kill takes the whole
// group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
