package demo

import "syscall"

// setParentDeathSignal makes the kernel kill a worker whose demo process
// dies, even by SIGKILL, when no cleanup can run.
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGKILL
}
