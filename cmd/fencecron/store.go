package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/fencecron/fencecron/fencedstore/errcode"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencecron/fencecron/election/clustertls"
	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/httpstore"
)

// Exit codes of `fencecron publish` and `fencecron get`.
const (
	exitError      = 1 // anything else: bad input, bad token, unreachable store
	exitUsage      = 2
	exitStaleOwner = 3 // the store holds a newer token; nothing was written
	exitConflict   = 4 // If-Match differs from the key's version; nothing was written
	exitNotFound   = 5 // get: no such key
	exitExpired    = 6 // the token's expiry has passed; nothing was written
)

// storeAddr is where the client commands find the store: the -store flag,
// else FENCECRON_STORE (set for jobs), else FENCECRON_ADDR, else the
// default node address.
func storeAddr(flagValue string) string {
	for _, v := range []string{flagValue, os.Getenv("FENCECRON_STORE")} {
		if v != "" {
			return v
		}
	}
	return defaultAddr()
}

// storeClient is a client of the store at addr. Over https it trusts
// what -ca, -insecure or their variables say; without them, the cluster CA
// in $FENCECRON_STORE_CA (the worker sets it and FENCECRON_STORE for every
// job, which holds no cluster secret and checks that the store is a node
// of its cluster); else the system's roots (a node behind api.tls).
func storeClient(addr string, tf *tlsFlags, sendsToken bool) (*httpstore.Client, error) {
	c := httpstore.NewClient(addr, nil)
	if !strings.HasPrefix(c.BaseURL, "https://") {
		// Anyone on the path could read the token and write with it.
		if sendsToken && !isLoopbackURL(c.BaseURL) {
			return nil, fmt.Errorf("refusing to send the fence token in the clear to %s: use https://%s (the worker sets FENCECRON_STORE and FENCECRON_STORE_CA for jobs)", c.BaseURL, strings.TrimPrefix(c.BaseURL, "http://"))
		}
	}
	to := reach{flag: "-store", env: "FENCECRON_STORE"}
	// Every attempt on this node establishes and publishes: keep the
	// connections of a busy second rather than handshake again.
	tune := func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 64; tr.TLSHandshakeTimeout = 10 * time.Second }
	var tr http.RoundTripper
	if storeCA := os.Getenv("FENCECRON_STORE_CA"); storeCA != "" && tf.caFile() == "" && !tf.insecure {
		pem, err := os.ReadFile(storeCA)
		if err != nil {
			return nil, fmt.Errorf("FENCECRON_STORE_CA: %w", err)
		}
		cfg, err := clustertls.TrustConfig(pem)
		if err != nil {
			return nil, fmt.Errorf("FENCECRON_STORE_CA %s: %w", storeCA, err)
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.TLSClientConfig = cfg
		tune(base)
		tr = explainingTransport{base: base, to: to}
	} else {
		var err error
		if tr, err = tf.transport(to, tune); err != nil {
			return nil, err
		}
	}
	c.HTTP = &http.Client{Timeout: 60 * time.Second, Transport: tr}
	return c, nil
}

// isLoopbackURL reports whether u's host is this host (a loopback address
// or localhost), where nothing crosses a network.
func isLoopbackURL(u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return false
	}
	host := parsed.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost"
}

// runPublish is `fencecron publish KEY [FILE]`: the body from FILE (or
// stdin), the signed token from FENCECRON_TOKEN. It presents only that
// token: a job's process never holds the cluster secret.
func runPublish(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("store", "", "store address (default $FENCECRON_STORE, $FENCECRON_ADDR or 127.0.0.1:8080)")
	ifMatch := fs.Int64("if-match", -1, "publish only if the key is at this version (0: only if it is new)")
	tf := addTLSFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: fencecron publish [-store ADDR] [-ca FILE] [-insecure] [-if-match VERSION] KEY [FILE]

Publishes FILE (default stdin) to KEY in the fenced store with the signed
fence token in $FENCECRON_TOKEN, which the worker gives every job.
Exit status: 0 applied, 3 stale_owner (a newer token holds the key, or
a forced release revoked the token),
4 conflict (-if-match differs), 6 expired (the token's expiry, its
attempt's grant time + timeout + lease TTL + 2m, has passed), 1 any
other error, 2 usage.
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitCode(exitUsage)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return exitCode(exitUsage)
	}
	key := fs.Arg(0)
	if err := fencedstore.ValidateKey(key); err != nil {
		return err
	}
	token := os.Getenv("FENCECRON_TOKEN")
	if token == "" {
		return errors.New("publish: FENCECRON_TOKEN is not set: publish runs inside a job, with the token its worker gave it")
	}
	in := stdin
	if fs.NArg() == 2 && fs.Arg(1) != "-" {
		f, err := os.Open(fs.Arg(1))
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		defer f.Close()
		in = f
	}
	body, err := io.ReadAll(io.LimitReader(in, fencedstore.DefaultMaxBodyBytes+1))
	if err != nil {
		return fmt.Errorf("publish: reading the body: %w", err)
	}
	if len(body) > fencedstore.DefaultMaxBodyBytes {
		return fmt.Errorf("publish %s: %w: more than %d bytes", key, fencedstore.ErrTooLarge, fencedstore.DefaultMaxBodyBytes)
	}
	req := fencedstore.PublishRequest{Key: key, Body: body}
	if *ifMatch >= 0 {
		v := uint64(*ifMatch)
		req.ExpectedVersion = &v
	}
	c, err := storeClient(storeAddr(*addr), tf, true)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	tf.warnInsecure(stderr, c.BaseURL, "the fence token")
	tctx, traced := publishTrace(ctx, key)
	res, err := c.PublishSigned(tctx, token, req)
	traced(res, err)
	line := fmt.Sprintf("%s %s version=%d greatest=%s\n", res.Outcome, key, res.Version, res.Greatest)
	if !res.Floor.IsZero() {
		line = fmt.Sprintf("%s %s version=%d greatest=%s floor=%s\n", res.Outcome, key, res.Version, res.Greatest, res.Floor)
	}
	var revoked *fencedstore.RevokedError
	switch {
	case err == nil:
		fmt.Fprint(stdout, line)
		return nil
	case errors.As(err, &revoked):
		fmt.Fprint(stderr, line)
		fmt.Fprintf(stderr, "fencecron: publish refused: a forced release revoked this token (its job's tokens up to %s are refused); nothing was written\n", revoked.Floor)
		return exitCode(exitStaleOwner)
	case errors.Is(err, fencedstore.ErrStaleOwner):
		fmt.Fprint(stderr, line)
		fmt.Fprintln(stderr, "fencecron: publish refused: the store holds a newer fence token; nothing was written")
		return exitCode(exitStaleOwner)
	case errors.Is(err, fencedstore.ErrConflict):
		fmt.Fprint(stderr, line)
		fmt.Fprintf(stderr, "fencecron: publish refused: %s is at version %d, not %d; nothing was written\n", key, res.Version, *ifMatch)
		return exitCode(exitConflict)
	case errors.Is(err, fencedstore.ErrExpired):
		fmt.Fprint(stderr, line)
		fmt.Fprintln(stderr, "fencecron: publish refused: the token has expired (this attempt ran past its timeout and lease); nothing was written")
		return exitCode(exitExpired)
	}
	return fmt.Errorf("publish %s: %w", key, reachErr(err))
}

// runGet is `fencecron get [-version N] KEY`: the body to stdout.
func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("store", "", "store address (default $FENCECRON_STORE, $FENCECRON_ADDR or 127.0.0.1:8080)")
	version := fs.Uint64("version", 0, "an earlier version of the body, if the store keeps it (store.keep_versions); 0: the current one")
	token := fs.String("token", os.Getenv("FENCECRON_API_TOKEN"), "an access token with read-store, for a node with acl enabled (or FENCECRON_API_TOKEN)")
	tf := addTLSFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: fencecron get [-store ADDR] [-ca FILE] [-insecure] [-token TOKEN] [-version N] KEY

Writes KEY's body from the fenced store to stdout; with -version, the body
of that version, if the store still keeps it.
Exit status: 0 found, 5 no such key or version, 1 any other error, 2 usage.
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitCode(exitUsage)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitCode(exitUsage)
	}
	c, err := storeClient(storeAddr(*addr), tf, false)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	var obj fencedstore.Object
	get := func() {
		if *version > 0 {
			obj, err = c.GetVersion(ctx, fs.Arg(0), *version)
		} else {
			obj, err = c.Get(ctx, fs.Arg(0))
		}
	}
	get()
	// A node with acl enabled refuses a read without a token: ask again
	// with it (a node without ACLs never sees it).
	var re *errcode.RemoteError
	var ae interface{ StatusCode() int }
	status := 0
	switch {
	case errors.As(err, &re):
		status = re.Status
	case errors.As(err, &ae):
		status = ae.StatusCode()
	}
	if *token != "" && (status == http.StatusUnauthorized || status == http.StatusForbidden) {
		c.ReadToken = *token
		get()
	}
	switch {
	case errors.Is(err, fencedstore.ErrNotFound) && *version > 0:
		fmt.Fprintf(stderr, "fencecron: %v\n", err)
		return exitCode(exitNotFound)
	case errors.Is(err, fencedstore.ErrNotFound):
		fmt.Fprintf(stderr, "fencecron: %s: no such key\n", fs.Arg(0))
		return exitCode(exitNotFound)
	case err != nil:
		return fmt.Errorf("get %s: %w", fs.Arg(0), reachErr(err))
	}
	_, err = stdout.Write(obj.Body)
	return err
}

// secretFile is where a dev node keeps its generated cluster secret.
const secretFile = "cluster.secret"

// loadOrCreateSecret returns the cluster secret kept in dir (hex, mode
// 0600), creating a random 32-byte one the first time, so tokens signed
// before a restart still verify after it.
func loadOrCreateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, secretFile)
	if b, err := readSecret(path); !errors.Is(err, os.ErrNotExist) {
		return b, err
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	tmp, err := os.CreateTemp(dir, secretFile+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(raw) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	// Link fails if another process created the file first; use theirs.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return readSecret(path)
}

func readSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %v): run chmod 600 on it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(secret) < fencedstore.MinSecretLen {
		return nil, fmt.Errorf("%s does not hold a hex secret of at least %d bytes; delete it to generate a new one", path, fencedstore.MinSecretLen)
	}
	return secret, nil
}

// exitCodeOf is for tests: the exit status run's error leads to.
func exitCodeOf(err error) int {
	var ec exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return int(ec)
	}
	return exitError
}
