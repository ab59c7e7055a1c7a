package builder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// fakeStore is a workspace in memory: a pure unit test of the verdict (the real store, with
// its row-level security, is tested over gRPC in internal/api). It records what it was asked.
type fakeStore struct {
	readable map[rulebook.Ref]bool
	versions map[rulebook.Pin]bool
	tags     []rulebook.TagRule
	fail     map[string]error // by method

	mu    sync.Mutex
	asked map[string][][]string
}

func (f *fakeStore) record(method string, items []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked == nil {
		f.asked = map[string][][]string{}
	}
	f.asked[method] = append(f.asked[method], items)
}

func (f *fakeStore) ReadablePaths(_ context.Context, _, _ string, refs []rulebook.Ref) (map[rulebook.Ref]struct{}, error) {
	var items []string
	out := map[rulebook.Ref]struct{}{}
	for _, r := range refs {
		items = append(items, string(r.Kind)+":"+r.Path)
		if f.readable[r] {
			out[r] = struct{}{}
		}
	}
	f.record("ReadablePaths", items)
	return out, f.fail["ReadablePaths"]
}

func (f *fakeStore) PinnedVersions(_ context.Context, _ string, pins []rulebook.Pin) (map[rulebook.Pin]struct{}, error) {
	var items []string
	out := map[rulebook.Pin]struct{}{}
	for _, p := range pins {
		items = append(items, p.Path+"@"+p.Hash)
		if f.versions[p] {
			out[p] = struct{}{}
		}
	}
	f.record("PinnedVersions", items)
	return out, f.fail["PinnedVersions"]
}

func (f *fakeStore) WorkerTags(context.Context, string) ([]rulebook.TagRule, error) {
	f.record("WorkerTags", nil)
	return f.tags, f.fail["WorkerTags"]
}

var (
	operator  = rulebook.Tenancy{Workspace: "w", Username: "op", Role: rulebook.RoleOperator}
	developer = rulebook.Tenancy{Workspace: "w", Username: "dev", Role: rulebook.RoleDeveloper}
)

func script(p string) rulebook.Ref { return rulebook.Ref{Kind: rulebook.KindScript, Path: p} }

// flowOf builds a flow of script steps; a step "path@hash" is pinned, "path#tag" pins a tag.
func flowOf(steps ...string) string {
	var mods []string
	for i, s := range steps {
		extra := ""
		if p, h, ok := strings.Cut(s, "@"); ok {
			s, extra = p, fmt.Sprintf(`,"hash":%q`, h)
		}
		if p, tag, ok := strings.Cut(s, "#"); ok {
			s, extra = p, fmt.Sprintf(`,"tag_override":%q`, tag)
		}
		mods = append(mods, fmt.Sprintf(`{"id":"s%d","value":{"type":"script","path":%q,"input_transforms":{}%s}}`, i, s, extra))
	}
	return `{"modules":[` + strings.Join(mods, ",") + `]}`
}

func refusalOf(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	require.ErrorAs(t, err, &r)
	return r
}

func findingsAt(fs Findings) []string {
	var out []string
	for _, f := range fs.List {
		out = append(out, string(f.Reason)+" "+f.Pointer)
	}
	return out
}

func TestCheckFlowVerdict(t *testing.T) {
	st := &fakeStore{
		readable: map[rulebook.Ref]bool{script("f/a/ok"): true, script("f/a/pinned"): true},
		versions: map[rulebook.Pin]bool{{Path: "f/a/pinned", Hash: "00000000000000a1"}: true},
		tags:     []rulebook.TagRule{{Name: "default"}, {Name: "gpu", Privileged: true}},
	}
	c := &Checker{Store: st}

	t.Run("every reference readable, known pin, allowed tag: allowed, references listed", func(t *testing.T) {
		res, err := c.CheckFlow(context.Background(), operator, flowOf("f/a/ok", "f/a/ok", "f/a/pinned@00000000000000a1", "f/a/ok#default"))
		require.NoError(t, err)
		defer res.Release()
		assert.Len(t, res.Report.Runnables, 4)
		assert.True(t, res.Code.Empty())
	})

	t.Run("each path is read once, hub paths never", func(t *testing.T) {
		st.asked = nil
		_, err := c.CheckFlow(context.Background(), developer, flowOf("f/a/ok", "f/a/ok", "hub/1/x", "f/a/ok"))
		require.NoError(t, err)
		assert.Equal(t, [][]string{{"script:f/a/ok"}}, st.asked["ReadablePaths"])
		assert.Empty(t, st.asked["WorkerTags"], "no tag: the rules are not read")
		assert.Empty(t, st.asked["PinnedVersions"], "no pin: no versions read")
	})

	t.Run("findings in order tags, paths, pins, each at its pointer", func(t *testing.T) {
		_, err := c.CheckFlow(context.Background(), operator,
			flowOf("f/a/pinned@00000000000000b2", "f/a/secret", "f/a/ok#gpu", "f/a/secret"))
		r := refusalOf(t, err)
		assert.Equal(t, "flow", r.What)
		assert.Equal(t, []string{
			"TAG_NOT_ALLOWED /modules/2/value/tag_override",
			"PATH_NOT_READABLE /modules/1/value",
			"PATH_NOT_READABLE /modules/3/value",
			"HASH_MISMATCH /modules/0/value/hash",
		}, findingsAt(r.Findings))
		assert.Equal(t, map[string]string{"tag": "gpu", "rule": "privileged"}, r.Findings.List[0].Metadata)
		assert.Equal(t, map[string]string{"kind": "script", "path": "f/a/secret"}, r.Findings.List[1].Metadata)
	})

	t.Run("an author's value findings are reported, not refusing; their paths still are", func(t *testing.T) {
		raw := `{"modules":[{"id":"a","value":{"type":"rawscript","content":"x","language":"bun","input_transforms":{}}}]}`
		res, err := c.CheckFlow(context.Background(), developer, raw)
		require.NoError(t, err)
		assert.Equal(t, []string{"INLINE_CODE /modules/0/value"}, findingsAt(res.Code))
		res.Release()

		_, err = c.CheckFlow(context.Background(), operator, raw)
		assert.Equal(t, []string{"INLINE_CODE /modules/0/value"}, findingsAt(refusalOf(t, err).Findings))

		_, err = c.CheckFlow(context.Background(), developer, flowOf("f/a/secret"))
		assert.Equal(t, []string{"PATH_NOT_READABLE /modules/0/value"}, findingsAt(refusalOf(t, err).Findings))
	})

	t.Run("a role that is not admin or developer is held to the walk", func(t *testing.T) {
		odd := rulebook.Tenancy{Workspace: "w", Username: "x", Role: rulebook.Role("auditor")}
		_, err := c.CheckFlow(context.Background(), odd, `{"modules":[{"id":"a","value":{"type":"flowscript","id":1}}]}`)
		refusalOf(t, err)
	})

	t.Run("findings past MaxFindings are counted, still refusing", func(t *testing.T) {
		var steps []string
		for i := range MaxFindings + 50 {
			steps = append(steps, fmt.Sprintf("f/a/missing_%d", i))
		}
		_, err := c.CheckFlow(context.Background(), operator, flowOf(steps...))
		r := refusalOf(t, err)
		assert.Len(t, r.Findings.List, MaxFindings)
		assert.Equal(t, 50, r.Findings.Omitted)
		assert.Equal(t, "flow refused: 150 violation(s)", r.Error())
	})

	t.Run("a document it cannot judge is an InputError", func(t *testing.T) {
		_, err := c.CheckFlow(context.Background(), operator, `{"modules":`)
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, DocFlow, ie.Doc)
	})
}

// A workspace that cannot be read is an error, never a yes; with several failing reads the
// first in the order tags, paths, pins is returned whatever the interleaving.
func TestCheckFlowStoreErrors(t *testing.T) {
	flow := flowOf("f/a/ok@00000000000000a1", "f/a/ok#gpu")
	errTags, errPaths, errPins := errors.New("tags down"), errors.New("paths down"), errors.New("pins down")
	for _, tc := range []struct {
		name string
		fail map[string]error
		want error
	}{
		{"tags", map[string]error{"WorkerTags": errTags}, errTags},
		{"paths", map[string]error{"ReadablePaths": errPaths}, errPaths},
		{"pins", map[string]error{"PinnedVersions": errPins}, errPins},
		{"paths and pins", map[string]error{"ReadablePaths": errPaths, "PinnedVersions": errPins}, errPaths},
		{"all", map[string]error{"WorkerTags": errTags, "ReadablePaths": errPaths, "PinnedVersions": errPins}, errTags},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Everything would be allowed: only the failure can stop it.
			st := &fakeStore{readable: map[rulebook.Ref]bool{script("f/a/ok"): true},
				versions: map[rulebook.Pin]bool{{Path: "f/a/ok", Hash: "00000000000000a1"}: true},
				tags:     []rulebook.TagRule{{Name: "gpu"}}, fail: tc.fail}
			res, err := (&Checker{Store: st}).CheckFlow(context.Background(), operator, flow)
			assert.Nil(t, res)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestCheckApp(t *testing.T) {
	st := &fakeStore{readable: map[rulebook.Ref]bool{script("f/a/ok"): true}}
	c := &Checker{Store: st}
	ctx := context.Background()
	value := `{"grid":[],"hiddenInlineScripts":[],"css":{},"norefreshbar":false}`

	t.Run("policy and value paths are both read, in one query", func(t *testing.T) {
		st.asked = nil
		pol := `{"execution_mode":"publisher","triggerables_v2":{"a:script/f/a/ok":{"static_inputs":{}},"b:script/f/a/secret":{"static_inputs":{}}}}`
		_, err := c.CheckApp(ctx, operator, rulebook.OperatorSettings{}, AppRequest{Value: value, Policy: pol, Deploy: DeployMultipart})
		r := refusalOf(t, err)
		assert.Equal(t, "app", r.What)
		require.Len(t, r.Findings.List, 1)
		assert.Equal(t, ReasonPathNotReadable, r.Findings.List[0].Reason)
		assert.Equal(t, DocAppPolicy, r.Findings.List[0].Doc)
		assert.Len(t, st.asked["ReadablePaths"], 1)
	})

	t.Run("the source deploy path is refused to operators, needs scopes from authors", func(t *testing.T) {
		_, err := c.CheckApp(ctx, operator, rulebook.OperatorSettings{}, AppRequest{Value: value, Deploy: DeploySource, Scopes: []string{ScopeAll}})
		assert.Equal(t, []string{"SOURCE_DEPLOY "}, findingsAt(refusalOf(t, err).Findings))
		_, err = c.CheckApp(ctx, developer, rulebook.OperatorSettings{}, AppRequest{Value: value, Deploy: DeploySource, Scopes: []string{"apps:write"}})
		assert.Equal(t, []string{"MISSING_SCOPE "}, findingsAt(refusalOf(t, err).Findings))
		res, err := c.CheckApp(ctx, developer, rulebook.OperatorSettings{}, AppRequest{Value: value, Deploy: DeploySource, Scopes: []string{ScopeAll}})
		require.NoError(t, err)
		res.Release()
	})

	t.Run("the stored policy: normalized for operators, as sent for authors", func(t *testing.T) {
		res, err := c.CheckApp(ctx, operator, rulebook.OperatorSettings{}, AppRequest{Value: value, Deploy: DeployMultipart})
		require.NoError(t, err)
		assert.Contains(t, res.NormalizedPolicy, `"sandbox":true`)
		res.Release()
		for _, sent := range []string{"", " null ", `{"execution_mode":"publisher"}`} {
			res, err := c.CheckApp(ctx, developer, rulebook.OperatorSettings{}, AppRequest{Value: value, Policy: sent, Deploy: DeployMultipart})
			require.NoError(t, err)
			want := sent
			if strings.TrimSpace(sent) == "" || strings.TrimSpace(sent) == "null" {
				want = "{}"
			}
			assert.Equal(t, want, res.NormalizedPolicy)
			res.Release()
		}
	})
}

func TestCheckPreview(t *testing.T) {
	ctx := context.Background()
	st := &fakeStore{readable: map[rulebook.Ref]bool{script("f/a/s"): true, {Kind: rulebook.KindFlow, Path: "f/a/f"}: true}}
	c := &Checker{Store: st}

	t.Run("a bare path is the script or the flow of that path: one readable is enough", func(t *testing.T) {
		refs, err := c.CheckPreview(ctx, operator, "f/a/s", false)
		require.NoError(t, err)
		assert.Equal(t, []RunnableRef{{Kind: KindScript, Path: "f/a/s"}}, refs)
	})

	t.Run("a bare path neither readable is one finding", func(t *testing.T) {
		_, err := c.CheckPreview(ctx, operator, "f/a/nothing", false)
		r := refusalOf(t, err)
		require.Len(t, r.Findings.List, 1)
		assert.Equal(t, map[string]string{"kind": "script or flow", "path": "f/a/nothing"}, r.Findings.List[0].Metadata)
		assert.Equal(t, "no script or flow f/a/nothing is readable by op", r.Findings.List[0].Message)
	})

	t.Run("a prefixed path must be readable as named", func(t *testing.T) {
		refs, err := c.CheckPreview(ctx, operator, "comp:flow/f/a/f", false)
		require.NoError(t, err)
		assert.Equal(t, []RunnableRef{{Kind: KindFlow, Path: "f/a/f"}}, refs)
		_, err = c.CheckPreview(ctx, operator, "script/f/a/f", false)
		assert.Equal(t, []string{"PATH_NOT_READABLE "}, findingsAt(refusalOf(t, err).Findings))
	})

	t.Run("raw code: refused to operators, nothing read", func(t *testing.T) {
		st.asked = nil
		_, err := c.CheckPreview(ctx, operator, "", true)
		assert.Equal(t, []string{"INLINE_CODE "}, findingsAt(refusalOf(t, err).Findings))
		refs, err := c.CheckPreview(ctx, developer, "", true)
		require.NoError(t, err)
		assert.Empty(t, refs)
		assert.Empty(t, st.asked)
	})
}
