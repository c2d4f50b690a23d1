package pages

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/fencecron/fencecron/fencedstore"
	"github.com/fencecron/fencecron/web/api"
)

// The Store pages: a page of keys under a prefix, and one key with its
// body, its versions and every decision on it.

type storePage struct {
	pageBase
	Prefix string
	Keys   []fencedstore.Meta
	Error  string
	// Next is the URL of the next page; First that of the first, when
	// this is not it.
	Next, First string
}

// storePageKeys is how many keys one Store page shows.
const storePageKeys = 100

// handleStorePage shows one page of keys under a prefix, in key order:
// one bounded range read, never the whole store (a busy store has keys by
// the hundred thousand). The cursor is the API's (GET /api/v1/store).
func (s *Dashboard) handleStorePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := &storePage{pageBase: s.base(r, "Store", "store"), Prefix: q.Get("prefix")}
	if err := fencedstore.ValidatePrefix(p.Prefix); err != nil {
		s.API.Error(w, r, api.BadRequest("prefix %q: %v", p.Prefix, err))
		return
	}
	after, err := fencedstore.DecodeCursor(p.Prefix, q.Get("cursor"))
	if err != nil {
		s.API.Error(w, r, api.BadRequest("%v", err))
		return
	}
	page, err := fencedstore.ListPage(r.Context(), s.Store, p.Prefix, after, storePageKeys)
	if err != nil {
		p.Error = err.Error()
	}
	p.Keys = page.Keys
	link := func(cursor string) string {
		v := url.Values{}
		if p.Prefix != "" {
			v.Set("prefix", p.Prefix)
		}
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		if len(v) == 0 {
			return "/store"
		}
		return "/store?" + v.Encode()
	}
	if page.Next != "" {
		p.Next = link(fencedstore.EncodeCursor(p.Prefix, page.Next))
	}
	if after != "" {
		p.First = link("")
	}
	s.render(w, r, http.StatusOK, "store.html", p)
}

type keyPage struct {
	pageBase
	Key      string
	Meta     *fencedstore.Meta
	Body     string
	BodyNote string
	History  []fencedstore.Decision
	Refused  int
	Timeline svgTimeline
	// Earlier are the versions before the current one the page links to
	// (the store answers 404 for one it no longer keeps).
	Earlier []uint64
}

// maxEarlierLinks bounds the links to earlier versions on a key's page.
const maxEarlierLinks = 5

// maxPreview bounds the body shown on a key's page.
const maxPreview = 8 << 10

func (s *Dashboard) handleKeyPage(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "*")
	if k, err := url.PathUnescape(key); err == nil {
		key = k
	}
	if err := fencedstore.ValidateKey(key); err != nil {
		s.API.Error(w, r, api.BadRequest("key %q: %v", key, err))
		return
	}
	p := &keyPage{pageBase: s.base(r, "Key "+key, "store"), Key: key}
	hist, err := s.Store.History(r.Context(), key)
	if err != nil {
		s.API.Error(w, r, fmt.Errorf("history of %s: %w", key, err))
		return
	}
	slices.Reverse(hist)
	p.History = hist
	for _, d := range hist {
		if !d.Outcome.Accepted() {
			p.Refused++
		}
	}
	if obj, err := s.Store.Get(r.Context(), key); err == nil {
		p.Meta = &obj.Meta
		for v := obj.Version - 1; v >= 1 && len(p.Earlier) < maxEarlierLinks; v-- {
			p.Earlier = append(p.Earlier, v)
		}
		body := obj.Body
		if len(body) > maxPreview {
			body, p.BodyNote = body[:maxPreview], fmt.Sprintf("the first %d of %d bytes", maxPreview, len(obj.Body))
		}
		if utf8.Valid(body) {
			p.Body = string(body)
		} else {
			p.BodyNote = fmt.Sprintf("%d bytes of binary data", len(obj.Body))
		}
	}
	p.Timeline, _ = s.keyTimeline(r, key)
	s.render(w, r, http.StatusOK, "key.html", p)
}
