package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxdriver"
	"github.com/txbox/txbox/txboxmigrate"
)

func TestParseDB(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw     string
		dialect txboxdriver.Dialect
		path    string
		err     string
	}{
		{raw: "sqlite://txbox.db", dialect: txboxdriver.SQLite, path: "txbox.db"},
		{raw: "sqlite:txbox.db", dialect: txboxdriver.SQLite, path: "txbox.db"},
		{raw: "sqlite:///var/lib/app.db", dialect: txboxdriver.SQLite, path: "/var/lib/app.db"},
		{raw: "postgres://u:secret@h:5432/db?sslmode=disable", dialect: txboxdriver.Postgres},
		{raw: "postgresql://h/db", dialect: txboxdriver.Postgres},
		{raw: "sqlite://", err: "no file name"},
		{raw: "sqlite://a.db?mode=ro", err: "query parameters are not supported"},
		{raw: "mysql://u:secret@h/db", dialect: txboxdriver.MySQL},
		{raw: "mysql://u:secret@h:3306/", err: "want one database name"},
		{raw: "mysql://u:secret@h/db?parseTime=maybe", err: "invalid bool"},
		{raw: "oracle://u:secret@h/db", err: "unsupported database URL"},
		{raw: "", err: "--db is empty"},
	} {
		got, err := parseDB(tc.raw)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseDB(%q) err = %v, want %q", tc.raw, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("parseDB(%q) leaks the password: %v", tc.raw, err)
			}
			continue
		}
		if err != nil || got.dialect != tc.dialect || got.path != tc.path {
			t.Errorf("parseDB(%q) = %+v, %v; want %s %q", tc.raw, got, err, tc.dialect, tc.path)
		}
		if strings.Contains(got.String(), "secret") {
			t.Errorf("%q prints its password: %s", tc.raw, got)
		}
	}
}

// A file name with characters a file: URI reads specially opens that file.
func TestSQLiteOddPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a%20b#c?.db")
	db, err := openDB(context.Background(), "sqlite://"+strings.ReplaceAll(path, "?", "_"))
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := os.Stat(strings.ReplaceAll(path, "?", "_")); err != nil {
		t.Fatalf("file not created under its own name: %v", err)
	}
}

func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"mysql://root@127.0.0.1/app":                               "root@tcp(127.0.0.1:3306)/app?parseTime=true",
		"mysql://u:p%40ss@db.example:3307/app":                     "u:p@ss@tcp(db.example:3307)/app?parseTime=true",
		"mariadb://u:p@h/app?tls=skip-verify&clientFoundRows=true": "u:p@tcp(h:3306)/app?parseTime=true&clientFoundRows=true&tls=skip-verify",
	} {
		got, err := mysqlDSN(raw)
		if err != nil || got != want {
			t.Errorf("mysqlDSN(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

// A mysql:// URL opens the database and migrates it.
func TestMySQLURL(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	var name string
	testenv.Must(t, db.QueryRowContext(context.Background(), "SELECT DATABASE()").Scan(&name), "database name")
	d, err := openDB(context.Background(), "mysql://root@127.0.0.1:3306/"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := d.migrator(txboxmigrate.Config{})
	testenv.Must(t, err, "migrator")
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	testenv.Must(t, db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM txbox_outbox").Scan(&n), "count")
}
