// Package sysdeps finds the programs that sendonce's commands and tests take
// from the machine rather than from Go modules (PostgreSQL's server binaries
// for the throwaway clusters, Chromium for the browser tests, PgBouncer for
// the pooler tests) and, when one is missing, installs the distribution's
// package for it: apt-get on Debian and its kin (as root, or through
// "sudo -n" when that needs no password), Homebrew on macOS. It says what it will run before running it. Where it
// cannot install (no package manager it knows, no root and no sudo without
// a password, or SENDONCE_NO_INSTALL set), it fails with the one command a
// person should run.
//
// One Dep describes each program; Ensure is the only way to get one.
package sysdeps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// EnvNoInstall, when set to anything but "" or "0", stops Ensure from
// installing: it reports what is missing and the command to run instead.
const EnvNoInstall = "SENDONCE_NO_INSTALL"

// Dep is a program taken from the machine.
type Dep struct {
	// Name says what is missing, for a person: "PostgreSQL's server
	// binaries (initdb, pg_ctl)".
	Name string
	// Find returns where the program is (a file or a directory), or an
	// error saying where it looked.
	Find func() (string, error)
	// Apt is the Debian package that brings it.
	Apt string
	// Brew is the Homebrew formula (or "--cask NAME") that brings it.
	Brew string
}

// ErrMissing matches (errors.Is) the error of an Ensure that could not get
// the program.
var ErrMissing = errors.New("sysdeps: missing")

// MissingError says what is missing and the one command that installs it.
type MissingError struct {
	Dep     string
	Command string // the command a person should run; "" when none is known
	Reason  string // why Ensure did not install it (or what failed)
}

func (e *MissingError) Error() string {
	s := e.Dep + " not found"
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Command != "" {
		s += "; install with: " + e.Command
	}
	return s
}

// Is makes errors.Is(err, ErrMissing) true.
func (e *MissingError) Is(target error) bool { return target == ErrMissing }

// Ensure returns what d.Find finds. When it finds nothing, Ensure installs
// d's package (saying on out what it runs, and passing the installer's
// output through), then looks again.
func Ensure(ctx context.Context, d Dep, out io.Writer) (string, error) {
	where, findErr := d.Find()
	if findErr == nil {
		return where, nil
	}
	p := plan(d)
	if v := os.Getenv(EnvNoInstall); v != "" && v != "0" {
		return "", &MissingError{Dep: d.Name, Command: p.advice, Reason: findErr.Error() + "; " + EnvNoInstall + " is set, so nothing was installed"}
	}
	if p.steps == nil {
		return "", &MissingError{Dep: d.Name, Command: p.advice, Reason: findErr.Error() + "; " + p.why}
	}
	fmt.Fprintf(out, "%s: missing (%v)\ninstalling it: %s\n", d.Name, findErr, p.show)
	if err := p.run(ctx, out); err != nil {
		return "", &MissingError{Dep: d.Name, Command: p.advice, Reason: "the install failed: " + err.Error()}
	}
	where, err := d.Find()
	if err != nil {
		return "", &MissingError{Dep: d.Name, Command: p.advice, Reason: "installed, but still not found: " + err.Error()}
	}
	fmt.Fprintf(out, "%s: installed (%s)\n", d.Name, where)
	return where, nil
}

// Command is the one command that installs d on this machine, for
// messages: what Ensure would run, or what a person should.
func Command(d Dep) string { return plan(d).advice }

// installPlan is how to install a Dep here.
type installPlan struct {
	steps  [][]string // nil: cannot install from here (why says so)
	retry  [][]string // run before a second try of the last step when it fails
	show   string     // the steps, as printed
	advice string     // the one command for a person
	why    string
}

func plan(d Dep) installPlan {
	switch {
	case runtime.GOOS == "darwin" && d.Brew != "":
		cmd := append([]string{"brew", "install"}, strings.Fields(d.Brew)...)
		p := installPlan{advice: strings.Join(cmd, " ")}
		if _, err := exec.LookPath("brew"); err != nil {
			p.why = "Homebrew is not installed"
			return p
		}
		p.steps, p.show = [][]string{cmd}, p.advice
		return p
	case runtime.GOOS == "linux" && d.Apt != "":
		install := []string{"apt-get", "install", "-y", "-q", d.Apt}
		update := []string{"apt-get", "update", "-q"}
		p := installPlan{advice: "sudo apt-get install -y " + d.Apt}
		if _, err := exec.LookPath("apt-get"); err != nil {
			p.advice = "the " + d.Apt + " package of your distribution"
			p.why = "no apt-get here"
			return p
		}
		var prefix []string
		switch {
		case os.Geteuid() == 0:
			p.advice = "apt-get install -y " + d.Apt
		case sudoWorks():
			prefix = []string{"sudo", "-n"}
		default:
			p.why = "not root, and sudo needs a password"
			return p
		}
		p.steps = [][]string{append(prefix, install...)}
		p.retry = [][]string{append(prefix, update...)}
		p.show = strings.Join(p.steps[0], " ") + " (after " + strings.Join(p.retry[0], " ") + " if the package lists are stale)"
		return p
	default:
		p := installPlan{why: "no package manager known for " + runtime.GOOS}
		if d.Apt != "" {
			p.advice = "the " + d.Apt + " package of your distribution"
		}
		return p
	}
}

func (p installPlan) run(ctx context.Context, out io.Writer) error {
	for i, step := range p.steps {
		err := runStep(ctx, step, out)
		if err != nil && i == len(p.steps)-1 && p.retry != nil {
			for _, r := range p.retry {
				if err := runStep(ctx, r, out); err != nil {
					return err
				}
			}
			err = runStep(ctx, step, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func runStep(ctx context.Context, step []string, out io.Writer) error {
	cmd := exec.CommandContext(ctx, step[0], step[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(step, " "), err)
	}
	return nil
}

// sudoWorks reports whether sudo runs without asking for a password.
func sudoWorks() bool {
	if _, err := exec.LookPath("sudo"); err != nil {
		return false
	}
	return exec.Command("sudo", "-n", "true").Run() == nil
}
