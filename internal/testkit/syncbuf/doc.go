// Package syncbuf holds Buffer, a bytes.Buffer that one goroutine may
// write while another reads it: the output of a command or a child process
// that a test (or the benchmark) reads while the command still runs.
//
// A plain bytes.Buffer handed to exec.Cmd.Stdout, to a logger, or to a
// command running in a goroutine is a data race the moment the test reads
// it before the writer is done; the race detector says so, and sometimes
// the read tears. Buffer takes a lock around every call:
//
//	var out syncbuf.Buffer
//	cmd.Stdout, cmd.Stderr = &out, &out
//	_ = cmd.Start()
//	for !strings.Contains(out.String(), "ready") { ... }
package syncbuf
