package bolt_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/bolt"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

const crashPathEnv = "FENCECRON_BOLT_CRASH_PATH"

// crashRetention keeps every decision the crash test makes.
const crashRetention = 1 << 20

func TestMain(m *testing.M) {
	storetest.MaybeCrashChild(func() (fencedstore.Store, error) {
		s := bolt.New(os.Getenv(crashPathEnv))
		s.HistoryRetention = crashRetention
		return s, s.Open()
	})
	os.Exit(m.Run())
}

// A child process writes continuously and is killed with SIGKILL at a
// random point, 24 times; after each kill the store must hold everything it
// acknowledged, and no greatest token may have gone back.
func TestStore_SurvivesSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	storetest.RunCrash(t, 24, []string{crashPathEnv + "=" + path}, func(t *testing.T) (fencedstore.Store, func()) {
		s := bolt.New(path)
		s.HistoryRetention = crashRetention
		if err := s.Open(); err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		return s, func() { s.Close() }
	})
}
