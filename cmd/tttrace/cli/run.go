package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes"
)

// Version is tttrace's version, set at build time.
var Version = "dev"

// exitError carries the exit status an error deserves.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

// Main parses args, runs tttrace and returns its exit status. Errors are
// printed once, on stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := Parse(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %v\n", err)
		return ExitUsage
	}
	if f.ShowHelp {
		return ExitOK
	}
	if f.ShowVer {
		fmt.Fprintf(stdout, "tttrace %s\n", Version)
		return ExitOK
	}
	code, err := Run(ctx, f, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tttrace: %v\n", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return ExitError
	}
	return code
}

// session is one tracing run.
type session struct {
	f            *Flags
	stderr       io.Writer
	out          *bufio.Writer
	tracer       *probes.Tracer
	ledger       *devices.Ledger
	live         map[uint32]bool // traced processes not yet ended
	exits        chan exitNote
	jsonBuf      []byte
	decodeErrors uint64
}

type exitNote struct {
	pid          uint32
	code, signal int
}

// Run traces as f says and returns the exit status.
func Run(ctx context.Context, f *Flags, stdout, stderr io.Writer) (int, error) {
	out := stdout
	if f.Output != "" {
		of, err := os.Create(f.Output)
		if err != nil {
			return 0, fail(ExitError, "output: %w", err)
		}
		defer of.Close()
		out = of
	}
	if len(f.PIDs) > 0 {
		for _, pid := range f.PIDs {
			if err := probes.ProcessExists(pid); err != nil {
				return 0, fail(ExitNoProcess, "-p %d: no such process", pid)
			}
		}
	}
	libPath, mappedAtStart, err := findLibrary(ctx, f)
	if err != nil {
		return 0, err
	}
	lib, err := probes.OpenLibrary(libPath)
	if err != nil {
		return 0, fail(ExitNoLibrary, "library: %w", err)
	}
	defer lib.Close()
	syms, err := probes.ResolveSymbols(lib)
	if err != nil {
		return 0, fail(ExitUnsupported, "read symbols of %s: %w", libPath, err)
	}
	if err := syms.Check(lib); err != nil {
		return 0, fail(ExitUnsupported, "%w", err)
	}
	layout, err := probes.ResolveLayout(lib, syms, f.Layout)
	if err != nil {
		return 0, fail(ExitUnsupported, "%w", err)
	}
	tracer, err := probes.Load(syms, probes.Options{Layout: layout.Layout, RingSize: f.ringBytes})
	if err != nil {
		if errors.Is(err, probes.ErrPermission) {
			return 0, fail(ExitPermission, "%w", err)
		}
		return 0, fail(ExitError, "%w", err)
	}
	defer tracer.Close()

	s := &session{
		f:      f,
		stderr: stderr,
		out:    bufio.NewWriterSize(out, 1<<20),
		tracer: tracer,
		ledger: devices.NewLedger(),
		live:   map[uint32]bool{},
		exits:  make(chan exitNote, 64),
	}
	defer s.out.Flush()

	// Processes are added to the BPF filter before the probes go in, so no
	// call of theirs falls between attach and filter.
	var child *gatedChild
	if len(f.Command) > 0 {
		child, err = startGated(f.Command)
		if err != nil {
			return 0, err
		}
		defer child.abandon()
		if err := s.track(uint32(child.pid()), devices.ProcessInfo{Command: joinArgs(f.Command)}); err != nil {
			return 0, err
		}
	} else {
		for _, pid := range f.PIDs {
			info := devices.ProcessInfo{Command: probes.Cmdline(pid), AttachedMidRun: mappedAtStart[pid]}
			if err := s.track(uint32(pid), info); err != nil {
				return 0, err
			}
		}
	}
	if err := tracer.Attach(lib, syms); err != nil {
		return 0, fail(ExitUnsupported, "%w", err)
	}
	fmt.Fprintf(stderr, "tttrace: tracing %s (layout %s, %d probes)\n", libPath, layout.Layout.Name, len(tracer.Attached))
	for _, m := range syms.Missing {
		fmt.Fprintf(stderr, "tttrace: note: %s not found in the library: %s will not be seen\n", m.Function, m.Why)
	}
	if f.ReadyFile != "" {
		if err := os.WriteFile(f.ReadyFile, []byte("ready\n"), 0o644); err != nil {
			return 0, fail(ExitError, "ready file: %w", err)
		}
	}

	if child != nil {
		if err := child.release(); err != nil {
			return 0, err
		}
		go func() {
			code, sig := child.wait()
			s.exits <- exitNote{uint32(child.pid()), code, sig}
			_ = tracer.Reader().Flush()
		}()
	} else {
		for _, pid := range f.PIDs {
			go s.watchPID(ctx, pid)
		}
	}

	interrupted := s.loop(ctx)
	sum, err := s.finish()
	if err != nil {
		return 0, err
	}

	status := ExitOK
	if child != nil && !interrupted {
		if _, code, sig := s.ledger.Exited(uint32(child.pid())); sig != 0 {
			status = 128 + sig
		} else {
			status = code
		}
	}
	if sum.LostEvents > 0 {
		fmt.Fprintf(stderr, "tttrace: %d events lost: the ledger is incomplete (try a larger --ring-size)\n", sum.LostEvents)
		if status == ExitOK {
			status = ExitLost
		}
	}
	return status, nil
}

// track adds pid to the BPF filter and the ledger.
func (s *session) track(pid uint32, info devices.ProcessInfo) error {
	if err := s.tracer.AddPID(pid); err != nil {
		return fail(ExitError, "trace pid %d: %w", pid, err)
	}
	s.ledger.SetProcessInfo(pid, info)
	s.live[pid] = true
	return nil
}

// watchPID reports the end of a process that is not our child.
func (s *session) watchPID(ctx context.Context, pid int) {
	note := exitNote{pid: uint32(pid), code: -1}
	fd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for ctx.Err() == nil {
			n, err := unix.Poll(fds, 500)
			if err == nil && n > 0 {
				break
			}
			if err != nil && !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
	s.exits <- note
	_ = s.tracer.Reader().Flush()
}

// loop reads the ring buffer until every traced process has ended or ctx
// is cancelled (then it returns true).
func (s *session) loop(ctx context.Context) bool {
	rd := s.tracer.Reader()
	var rec ringbuf.Record
	tick := 100 * time.Millisecond
	for {
		rd.SetDeadline(time.Now().Add(tick))
		err := rd.ReadInto(&rec)
		if err == nil {
			s.handle(rec.RawSample)
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, ringbuf.ErrFlushed) {
			fmt.Fprintf(s.stderr, "tttrace: ring buffer: %v\n", err)
			return true
		}
		s.reapExits()
		if len(s.live) == 0 {
			return false
		}
		if ctx.Err() != nil {
			return true
		}
	}
}

// drain reads every record already in the ring buffer.
func (s *session) drain() {
	rd := s.tracer.Reader()
	var rec ringbuf.Record
	rd.SetDeadline(time.Now())
	for {
		err := rd.ReadInto(&rec)
		if err != nil {
			return
		}
		s.handle(rec.RawSample)
	}
}

// reapExits applies the ends of processes reported so far. A process's
// records were all committed before it ended, so after a drain that starts
// after the report none of them is still in the ring.
func (s *session) reapExits() {
	var notes []exitNote
	for {
		select {
		case n := <-s.exits:
			notes = append(notes, n)
			continue
		default:
		}
		break
	}
	if len(notes) == 0 {
		return
	}
	s.drain()
	for _, n := range notes {
		ev := events.Event{Kind: events.KindProcessExit, Pid: n.pid, TsNs: monotonicNow(), ExitCode: n.code, ExitSignal: n.signal, Chip: -1}
		s.emit(&ev)
		_ = s.tracer.RemovePID(n.pid)
		delete(s.live, n.pid)
	}
}

func (s *session) handle(raw []byte) {
	var ev events.Event
	if err := events.Decode(raw, &ev); err != nil {
		s.decodeErrors++
		if s.decodeErrors <= 10 {
			fmt.Fprintf(s.stderr, "tttrace: bad record: %v\n", err)
		}
		return
	}
	s.emit(&ev)
}

func (s *session) emit(ev *events.Event) {
	s.ledger.Apply(ev)
	if s.f.JSON && !s.f.NoEvents {
		s.jsonBuf = events.AppendJSON(s.jsonBuf[:0], ev)
		_, _ = s.out.Write(s.jsonBuf)
	}
}

// finish drains what is left, accounts losses no record reported, and
// writes the summary.
func (s *session) finish() (*devices.Summary, error) {
	s.drain()
	if err := s.tracer.Detach(); err != nil {
		fmt.Fprintf(s.stderr, "tttrace: detach: %v\n", err)
	}
	s.drain()
	total, err := s.tracer.LostTotal()
	if err != nil {
		return nil, fail(ExitError, "%w", err)
	}
	if inBand := s.ledger.LostEvents(); total > inBand {
		ev := events.Event{Kind: events.KindLost, TsNs: monotonicNow(), LostBefore: total - inBand, Chip: -1}
		s.emit(&ev)
	}
	sum := s.ledger.Summary()
	if s.f.JSON {
		b, err := json.Marshal(sum)
		if err != nil {
			return nil, fail(ExitError, "encode summary: %w", err)
		}
		s.out.Write(b)
		s.out.WriteByte('\n')
	} else if err := devices.WriteReport(s.out, &sum); err != nil {
		return nil, fail(ExitError, "write report: %w", err)
	}
	if err := s.out.Flush(); err != nil {
		return nil, fail(ExitError, "write output: %w", err)
	}
	return &sum, nil
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
