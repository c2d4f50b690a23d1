package postgres_test

import (
	"os"
	"testing"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/fencedstore/postgres"
	"github.com/fencecron/fencecron/fencedstore/storetest"
)

const crashSchemaEnv = "FENCECRON_POSTGRES_CRASH_SCHEMA"

// crashRetention keeps every decision the crash test makes.
const crashRetention = 1 << 20

func TestMain(m *testing.M) {
	storetest.MaybeCrashChild(func() (fencedstore.Store, error) {
		s := postgres.New(os.Getenv(testURLEnv))
		s.Schema = os.Getenv(crashSchemaEnv)
		s.HistoryRetention = crashRetention
		return s, s.Open()
	})
	os.Exit(m.Run())
}

// A writer process killed with SIGKILL mid-transaction: PostgreSQL rolls
// back what was not committed, and everything acknowledged stays.
func TestStore_SurvivesSIGKILL(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	storetest.RunCrash(t, 20, []string{crashSchemaEnv + "=" + schema}, func(t *testing.T) (fencedstore.Store, func()) {
		s := postgres.New(url)
		s.Schema = schema
		s.HistoryRetention = crashRetention
		if err := s.Open(); err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		return s, func() { s.Close() }
	})
}
