package integration

import "syscall"

// procAttr puts a process in a group of its own, so a kill takes the whole
// group, and has the kernel kill it should the test binary die first (a
// -timeout panic skips the tests' cleanups).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
