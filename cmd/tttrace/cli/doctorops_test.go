package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDoctorTTNNOps: doctor reports the op table of the TT-NN libraries
// beside the TT-Metal library, the C++ library's op_t::invoke named by the
// typeinfo of the Python module beside it. The counts are nm's: the
// exported functions of each form in each library.
func TestDoctorTTNNOps(t *testing.T) {
	for _, tool := range []string{"g++", "cc", "nm", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	dir := t.TempDir()
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	src, err := filepath.Abs("../../../ttmetal/testdata/ttnn_ops.cpp")
	if err != nil {
		t.Fatal(err)
	}
	cc := []string{"-std=c++20", "-O2", "-shared", "-fPIC", "-DTTNN_ERA=2025", src}
	// Both stripped: the typeinfo is exported, .dynsym keeps it.
	run("g++", append(cc, "-o", filepath.Join(dir, "module.o"))...)
	run("g++", append(cc, "-DTTNN_NO_TYPEID", "-o", filepath.Join(dir, "cpp.o"))...)
	run("strip", "--strip-all", "-o", filepath.Join(dir, "_ttnn.so"), filepath.Join(dir, "module.o"))
	run("strip", "--strip-all", "-o", filepath.Join(dir, "_ttnncpp.so"), filepath.Join(dir, "cpp.o"))
	c := filepath.Join(dir, "lib.c")
	os.WriteFile(c, []byte("int tttrace_fixture(void) { return 1; }\n"), 0o644)
	run("cc", "-shared", "-fPIC", "-o", filepath.Join(dir, "libtt_metal.so"), c)

	// nm's count of each kind in a library's .dynsym.
	top := regexp.MustCompile(`^ttnn::(op_summary\[abi:cxx11\]\(|operations::(matmul::MatmulOperation|binary::BinaryOperation<[^>]*>|experimental::NlpConcatHeadsOperation)::invoke\()`)
	dev := regexp.MustCompile(`ttnn::device_operation::detail::(launch|invoke|launch_on_single_device|launch_on_worker_thread|launch_operation_with_adapter)<`)
	count := func(lib string) (ops, devs int) {
		out, err := exec.Command("nm", "-D", "-C", "--defined-only", lib).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.SplitN(l, " ", 3)
			if len(f) < 3 || !strings.ContainsAny(f[1], "TtWw") {
				continue
			}
			if top.MatchString(f[2]) {
				ops++
			} else if dev.MatchString(f[2]) {
				devs++
			}
		}
		return ops, devs
	}

	var stdout, stderr bytes.Buffer
	Doctor([]string{"--json", filepath.Join(dir, "libtt_metal.so")}, &stdout, &stderr)
	var rep DoctorReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s%s", err, stdout.String(), stderr.String())
	}
	if len(rep.Ops) != 2 {
		t.Fatalf("ttnn_ops: %+v", rep.Ops)
	}
	for _, o := range rep.Ops {
		ops, devs := count(o.Path)
		if o.Error != "" || o.Ops != ops || o.DeviceOps != devs || o.Truncated || ops < 2 || devs < 1 {
			t.Errorf("%s: %+v; nm: %d ops, %d device-op launches", o.Path, o, ops, devs)
		}
		if strings.HasSuffix(o.Path, "_ttnn.so") != (o.Registrations == 4) {
			t.Errorf("%s: %d registrations", o.Path, o.Registrations)
		}
	}
	stdout.Reset()
	Doctor([]string{filepath.Join(dir, "libtt_metal.so")}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "TT-NN ops\n") || !strings.Contains(stdout.String(), "registered_operation_rtti") {
		t.Errorf("the report says nothing of the TT-NN ops:\n%s", stdout.String())
	}
}
