package gridlink

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// squeue's lines in Jobs' format: names may hold the separator; headers,
// blank lines and warnings are skipped.
func TestParseJobs(t *testing.T) {
	out := "squeue: warning: something\n  17|COMPLETED|alice|0:01|g5k-n1|None|hello|world\n18_3|PENDING|alice|0:00||Resources|x\n\n"
	want := []Job{
		{ID: "17", State: "COMPLETED", User: "alice", Time: "0:01", Nodes: "g5k-n1", Reason: "None", Name: "hello|world"},
		{ID: "18_3", State: "PENDING", User: "alice", Time: "0:00", Nodes: "", Reason: "Resources", Name: "x"},
	}
	if got := parseJobs(out); !reflect.DeepEqual(got, want) {
		t.Errorf("parseJobs:\n got %+v\nwant %+v", got, want)
	}
}

// sbatch --parsable's answers.
func TestJobIDAnswer(t *testing.T) {
	for in, want := range map[string][2]string{"42": {"42", ""}, "42;g5k": {"42", "g5k"}, "7_1": {"7_1", ""}} {
		m := jobIDRE.FindStringSubmatch(in)
		if m == nil || m[1] != want[0] || m[2] != want[1] {
			t.Errorf("%q: %q", in, m)
		}
	}
	for _, bad := range []string{"", "Submitted batch job 42", "42;", "42 43"} {
		if jobIDRE.MatchString(bad) {
			t.Errorf("%q taken for a job ID", bad)
		}
	}
}

// Options reach sbatch as the words they were, whatever they hold: the
// quoting survives a real shell.
func TestShellQuote(t *testing.T) {
	words := []string{"-N", "2", "--job-name=my job", "--output=out-%j.txt", "it's", "$HOME", "`id`", "a\"b", "", "x;y", "--export=ALL,A=1"}
	line := "printf '%s\\n'"
	for _, w := range words {
		line += " " + shellQuote(w)
	}
	out, err := exec.Command("sh", "-c", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words {
		want += w + "\n"
	}
	if string(out) != want {
		t.Errorf("through sh: %q, want %q", out, want)
	}
}

// squeue's output comes from the frontend: whatever it holds, parseJobs
// keeps only lines of its format, with IDs that are job IDs.
func FuzzParseJobs(f *testing.F) {
	f.Add("17|COMPLETED|alice|0:01|g5k-n1|None|hello|world\n")
	f.Add("18_3|PENDING|alice|0:00||Resources|x\n\nsqueue: error: x\n")
	f.Add("|||||||\n1|2|3|4|5|6\n")
	f.Fuzz(func(t *testing.T, out string) {
		for _, j := range parseJobs(out) {
			if !jobArgRE.MatchString(j.ID) {
				t.Fatalf("job ID %q from %q", j.ID, out)
			}
			if strings.ContainsAny(j.State+j.User+j.Time+j.Nodes+j.Reason, "|\n") {
				t.Fatalf("a field holds the separator: %+v", j)
			}
		}
		if m := jobIDRE.FindStringSubmatch(strings.TrimSpace(out)); m != nil && !jobArgRE.MatchString(m[1]) {
			t.Fatalf("sbatch's answer %q gave job ID %q", out, m[1])
		}
	})
}
