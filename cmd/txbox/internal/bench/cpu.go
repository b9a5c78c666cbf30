package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// On a small machine the relay, the database and the broker share the same
// cores, so a rate alone does not say who spent them. cpuSample reads, from
// Linux's /proc, the CPU time used so far by this process, by each server
// this benchmark talks to, and by the whole machine; two samples around a
// measurement give its CPU cost per message.
type cpuSample struct {
	procs map[int]procCPU // by process id
	total float64         // seconds the machine was busy
}

type procCPU struct {
	group string  // see cpuGroups
	secs  float64 // user + system
}

// cpuGroups names, by process name, the servers whose CPU time is reported.
var cpuGroups = map[string]string{
	"postgres":     "postgres",
	"nats-server":  "broker",
	"redis-server": "broker",
	"beam.smp":     "broker", // RabbitMQ
}

// cpuColumns are the groups printed, in order; "this" is this process (the
// relay or the raw client, and kfake when it runs in-process).
var cpuColumns = []string{"this", "postgres", "broker"}

// ticksPerSecond is USER_HZ, 100 on every Linux architecture Go supports.
const ticksPerSecond = 100

// sampleCPU returns the current sample, or false where /proc cannot be read.
// With postmaster > 0, the postgres column holds only that server process
// and its children: the cluster this benchmark talks to, not another one
// on the same machine.
func sampleCPU(postmaster int) (cpuSample, bool) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, false
	}
	s := cpuSample{procs: map[int]procCPU{}}
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line)) // cpu user nice system idle iowait irq softirq steal ...
	for i := 1; i < len(f) && i <= 8; i++ {
		if i == 4 || i == 5 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseFloat(f[i], 64)
		s.total += v / ticksPerSecond
	}
	self := os.Getpid()
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process has gone
		}
		open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || closing < open || closing+2 > len(b) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		group := cpuGroups[string(b[open+1:closing])]
		if pid == self {
			group = "this"
		}
		if group == "" {
			continue
		}
		// After the name: state ppid ... utime (14th field) stime (15th).
		fields := strings.Fields(string(b[closing+2:]))
		if len(fields) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); group == "postgres" && postmaster > 0 && pid != postmaster && ppid != postmaster {
			continue // another cluster's
		}
		u, _ := strconv.ParseFloat(fields[11], 64)
		st, _ := strconv.ParseFloat(fields[12], 64)
		s.procs[pid] = procCPU{group, (u + st) / ticksPerSecond}
	}
	return s, true
}

// cpuUse is a measurement's CPU cost, in microseconds per message.
type cpuUse struct {
	by    map[string]float64
	total float64
}

// perMessage returns the CPU used between a and b for n messages. A process
// that started in between (a new database connection) counts whole; one
// that ended in between is missed.
func perMessage(a, b cpuSample, n int) cpuUse {
	u := cpuUse{by: map[string]float64{}, total: (b.total - a.total) / float64(n) * 1e6}
	for pid, p := range b.procs {
		was := a.procs[pid]
		if was.group != p.group { // a new process, or the id was reused
			was.secs = 0
		}
		u.by[p.group] += (p.secs - was.secs) / float64(n) * 1e6
	}
	return u
}

// sum is the CPU of the measurement's own processes (this, postgres,
// broker): the "sum" column.
func sum(u cpuUse) float64 {
	t := 0.0
	for _, c := range cpuColumns {
		t += u.by[c]
	}
	return t
}
