package cdc_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxpgx"
	"github.com/txbox/txbox/txboxpgx/cdc"
)

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// TestMain removes the binary buildTxbox built.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildTxbox compiles the txbox binary once for the package's tests.
func buildTxbox(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		built.dir, built.err = os.MkdirTemp("", "txbox-cdc-bin-")
		if built.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", built.dir+string(filepath.Separator), "github.com/txbox/txbox/cmd/txbox")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		built.bin = filepath.Join(built.dir, "txbox")
	})
	testenv.Must(t, built.err, "build txbox")
	return built.bin
}

// syncBuffer is a log the relay process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `txbox relay --cdc` is killed with SIGKILL again and again while writers
// commit; each new process streams from the slot's confirmed LSN. At the
// end the stream holds every committed message (0 lost), none that did
// not commit (0 phantom), each key in commit order; what a killed process
// published past its last confirmed LSN is published again, and JetStream
// drops those copies by Nats-Msg-Id.
func TestRelayKilledMidStream(t *testing.T) {
	t.Parallel()
	killedMidStream(t, "")
}

// TestRelayKilledMidStream in message mode: the writers' events are in
// the WAL only (txbox.Config.MessagePrefix), the relay reads them with
// --message-prefix.
func TestMessageModeRelayKilledMidStream(t *testing.T) {
	t.Parallel()
	killedMidStream(t, prefix)
}

// killedMidStream kills txbox relay --cdc again and again while writers
// commit, in table mode (prefix "") or in message mode, and checks the
// stream.
func killedMidStream(t *testing.T, prefix string) {
	bin := buildTxbox(t)
	_, pool := logicalCluster(t)
	url := pool.Config().ConnString()
	ctx := context.Background()
	_, err := cdc.CreateSlot(ctx, pool, cdc.Config{MessagePrefix: prefix})
	testenv.Must(t, err, "create slot")
	ns := testenv.EmbeddedNATS(t)
	nc, err := ns.Connect()
	testenv.Must(t, err, "nats")
	defer nc.Close()
	js, err := jetstream.New(nc)
	testenv.Must(t, err, "jetstream")
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CDC", Subjects: []string{"cdc.>"}})
	testenv.Must(t, err, "stream")

	ob, err := txbox.New(txboxpgx.New(pool), txbox.Config{MessagePrefix: prefix})
	testenv.Must(t, err, "txbox.New")
	keys := keysOf(12)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for !stop.Load() {
				if err := writeTx(ctx, pool, ob, keys[rnd.IntN(len(keys))], keys[rnd.IntN(len(keys))]); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	run := func() (*exec.Cmd, *syncBuffer) {
		log := &syncBuffer{}
		args := []string{"relay", "--cdc", "--db", url, "--broker", ns.ClientURL(), "--batch-size", "20", "--stats-interval", "0"}
		if prefix != "" {
			args = append(args, "--message-prefix", prefix)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TXBOX_LOG_LEVEL=info")
		cmd.Stdout, cmd.Stderr = log, log
		testenv.Must(t, cmd.Start(), "start relay")
		return cmd, log
	}
	rnd := rand.New(rand.NewPCG(3, 5))
	const kills = 6
	for i := range kills {
		cmd, log := run()
		eventually(t, "the relay reads the slot", func() (bool, string) {
			return strings.Contains(log.String(), "cdc relay reads the slot"), log.String()
		})
		before := streamLen(t, stream)
		eventually(t, "the relay publishes", func() (bool, string) {
			n := streamLen(t, stream)
			return n > before, fmt.Sprintf("stream at %d", n)
		})
		time.Sleep(time.Duration(rnd.IntN(300)) * time.Millisecond)
		testenv.Must(t, cmd.Process.Signal(syscall.SIGKILL), "kill %d", i)
		_ = cmd.Wait()
	}
	stop.Store(true)
	wg.Wait()
	cmd, log := run()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("last relay's log:\n%s", log.String())
		}
	}()
	want := committed(t, pool)
	total := 0
	for _, n := range want {
		total += n
	}
	eventually(t, "the stream holds every committed message", func() (bool, string) {
		n := streamLen(t, stream)
		return n >= uint64(total), fmt.Sprintf("%d of %d", n, total)
	})
	var acked []txbox.Message
	for seq := uint64(1); seq <= streamLen(t, stream); seq++ {
		m, err := stream.GetMsg(ctx, seq)
		testenv.Must(t, err, "get %d", seq)
		acked = append(acked, txbox.Message{ID: m.Header.Get("Nats-Msg-Id"), Key: m.Header.Get("Txbox-Key"), Payload: m.Data})
	}
	if dups := verdict(t, acked, want); dups != 0 {
		t.Fatalf("%d duplicates in the stream (JetStream dedupes on the message id)", dups)
	}
	t.Logf("%d messages, %d kills: 0 lost, 0 phantom, keys in order", total, kills)
}

func streamLen(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(context.Background())
	testenv.Must(t, err, "stream info")
	return info.State.Msgs
}
