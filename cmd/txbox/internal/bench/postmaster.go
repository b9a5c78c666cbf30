package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// postmasterPID returns the process id of the PostgreSQL server that pool
// talks to, from postmaster.pid in its data directory, or 0 when that
// cannot be read (another machine, no privilege to see the directory):
// then every process named postgres counts as the database's.
func postmasterPID(ctx context.Context, pool *pgxpool.Pool) int {
	var dir string
	if err := pool.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	pid, _ := strconv.Atoi(string(bytes.TrimSpace(line)))
	return pid
}
