package pgtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// cluster is a PostgreSQL server this process started in its own directory.
type cluster struct {
	bin      string // directory with initdb, pg_ctl, postgres
	dir      string // everything lives here: data/, sock/, log
	port     int
	password string // of the superuser "postgres"
	cred     *syscall.Credential
	watchdog *exec.Cmd
	alive    *os.File // write end of the pipe the watchdog blocks on
	opts     ClusterOptions
}

func (c *cluster) dataDir() string { return filepath.Join(c.dir, "data") }
func (c *cluster) logFile() string { return filepath.Join(c.dir, "log") }

// startCluster runs initdb and starts the server on a free port.
func startCluster(opts ClusterOptions) (_ *cluster, err error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, password: randomHex(16), opts: opts}
	if os.Geteuid() == 0 {
		// The server refuses to run as root; run all of it as "postgres".
		if c.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
	}
	if c.dir, err = makeDir(c.cred); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	// Start the watchdog before the server exists so that no window is left in which the
	// process can die and leak a running postmaster.
	if err := c.startWatchdog(); err != nil {
		return nil, err
	}
	if err := c.initdb(); err != nil {
		return nil, err
	}
	// A port picked by listening on :0 can be taken by someone else before the server binds
	// it (other test binaries do the same thing in parallel): retry with a new one.
	for attempt := 1; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		err = c.run("pg_ctl", "-D", c.dataDir(), "-l", c.logFile(), "-w", "-t", "60",
			"-o", "-p "+strconv.Itoa(c.port), "start")
		if err == nil {
			return c, nil
		}
		if attempt == 5 || !strings.Contains(c.logTail(), "already in use") {
			return nil, fmt.Errorf("pgtest: start postgres: %w", err)
		}
	}
}

func (c *cluster) initdb() error {
	pwfile := filepath.Join(c.dir, "pwfile")
	if err := c.writeFile(pwfile, c.password+"\n"); err != nil {
		return err
	}
	err := c.run("initdb", "-D", c.dataDir(), "-U", "postgres", "--pwfile="+pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	_ = os.Remove(pwfile)
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w", err)
	}
	sock := filepath.Join(c.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if err := c.chown(sock); err != nil {
		return err
	}
	// Every connection must present a password: tests log in as roles they create and
	// rely on a wrong password being rejected, which "trust" would hide.
	hba := "local all all scram-sha-256\n" +
		"host all all 127.0.0.1/32 scram-sha-256\n" +
		"host all all ::1/128 scram-sha-256\n"
	if err := c.writeFile(filepath.Join(c.dataDir(), "pg_hba.conf"), hba); err != nil {
		return err
	}
	// Durability is worthless for throw-away data and costs most of the test time.
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
password_encryption = 'scram-sha-256'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 128MB
`, strings.ReplaceAll(sock, "'", "''"))
	maxConns := 300
	if c.opts.MaxConnections > 0 {
		maxConns = c.opts.MaxConnections
	}
	conf += fmt.Sprintf("max_connections = %d\n", maxConns)
	if c.opts.TLS {
		cert, key, err := selfSignedCert()
		if err != nil {
			return fmt.Errorf("pgtest: certificate: %w", err)
		}
		// The server's default ssl_cert_file and ssl_key_file; the key must be the server
		// user's and 0600, which writeFile makes it.
		if err := c.writeFile(filepath.Join(c.dataDir(), "server.crt"), string(cert)); err != nil {
			return err
		}
		if err := c.writeFile(filepath.Join(c.dataDir(), "server.key"), string(key)); err != nil {
			return err
		}
		conf += "ssl = on\n"
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startWatchdog starts a detached shell that stops the server and removes c.dir as soon as
// this process is gone, however it ends (panic, os.Exit, SIGKILL). It blocks reading a pipe
// whose only write end this process holds: the kernel closes it when the process dies, which
// is immune to PID reuse and needs no permission to signal us (it runs as "postgres").
func (c *cluster) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	script := `read _ignored; "$1/pg_ctl" -D "$2/data" -m immediate -w -t 30 stop >/dev/null 2>&1; rm -rf "$2"`
	cmd := exec.Command("/bin/sh", "-c", script, "pgtest-watchdog", c.bin, c.dir)
	cmd.Stdin = r
	cmd.Dir = c.dir
	// Own process group: a Ctrl-C sent to the test's group must not kill the watchdog
	// before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("pgtest: start watchdog: %w", err)
	}
	c.watchdog, c.alive = cmd, w
	return nil
}

// stop shuts the server down without a checkpoint (the data is about to be deleted) and
// removes its directory. It is safe on a half-started cluster.
func (c *cluster) stop() {
	if c.dir == "" {
		return
	}
	if fileExists(filepath.Join(c.dataDir(), "postmaster.pid")) {
		_ = c.run("pg_ctl", "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "30", "stop")
	}
	_ = os.RemoveAll(c.dir)
	if c.watchdog != nil {
		// Closing the pipe wakes the watchdog, which finds nothing left to do; wait for it
		// rather than leave a zombie or a goroutine behind.
		c.alive.Close()
		_ = c.watchdog.Wait()
		c.watchdog, c.alive = nil, nil
	}
}

// run runs a PostgreSQL binary (as "postgres" when we are root) and returns its output and
// the tail of the server log in the error.
func (c *cluster) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	// The test's working directory may not be enterable by "postgres", and initdb complains.
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err,
			bytes.TrimSpace(out), c.logTail())
	}
	return nil
}

// logTail returns the last lines of the server log, for error messages.
func (c *cluster) logTail() string {
	b, err := os.ReadFile(c.logFile())
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\n--- server log (tail) ---\n" + strings.Join(lines, "\n")
}

func (c *cluster) writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return c.chown(path)
}

func (c *cluster) chown(path string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
}

// makeDir creates the cluster's private directory, owned by the server's user with mode 700.
// MkdirTemp makes it enterable by its owner only, so as root it is handed to "postgres", and
// its parents must be traversable by "postgres" (a TMPDIR under /root is not): fall back to
// /tmp then.
func makeDir(cred *syscall.Credential) (string, error) {
	parent := os.TempDir()
	if cred != nil && !traversable(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "pgtest-")
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("pgtest: %w", err)
		}
	}
	return dir, os.Chmod(dir, 0o700)
}

// traversable reports whether every directory from / to dir can be entered by anyone.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs a postgres user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtest: postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// Binary returns the path of a PostgreSQL program (psql, pg_dump...) from the installation
// the test cluster runs from. A missing one fails the test: Debian's server package depends on
// its client, so on a machine that runs the cluster it is a broken installation, not a reason
// to skip.
func Binary(t testing.TB, name string) string {
	t.Helper()
	dir, err := findBinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if !fileExists(p) {
		t.Fatalf("pgtest: no %s in %s", name, dir)
	}
	return p
}

// findBinDir returns the newest /usr/lib/postgresql/<version>/bin (the Debian layout CI uses),
// sorting versions numerically so that 10 beats 9.6. Only when none is installed there does it
// fall back to the pg_ctl on PATH (other systems' developer machines).
func findBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "pg_ctl")) {
			found = append(found, d)
		}
	}
	if len(found) > 0 {
		sort.Slice(found, func(i, j int) bool {
			return versionLess(filepath.Base(filepath.Dir(found[i])), filepath.Base(filepath.Dir(found[j])))
		})
		return found[len(found)-1], nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgtest: no PostgreSQL server found in /usr/lib/postgresql/*/bin " +
		"(install postgresql, or set TEST_DATABASE_URL)")
}

func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("pgtest: find a free port: %v is not TCP", l.Addr())
	}
	return addr.Port, nil
}

func (c *cluster) url(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
