package api_test

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/services/policy/internal/builder/buildertest"
	"github.com/millwright/millwright/services/policy/internal/testdb"
)

// A burst of large builder checks must not take policy down for everyone (issue 11 item 1:
// roleset and billing authenticate through policy). Checks in flight are bounded by their
// documents' bytes: with room for one large flow at a time and a short queue, a burst of 24
// gets some answers and ResourceExhausted OVERLOADED for the rest, never anything else, while
// Authenticate, which takes nothing from that bound, keeps answering quickly.
func TestBuilderChecksBoundedInFlight(t *testing.T) {
	r := startReplica(t, testdb.DSN(t), replicaOpts{checkBytes: 2 << 20, checkWait: 100 * time.Millisecond})
	benchWorkspace(t, r, "load", 8_000, 50)
	flow := string(buildertest.Flow(8_000, 50))
	require.Greater(t, len(flow), 1<<20, "one check must fill most of the bound")
	tok := userToken(t, r, "load", "op")
	_, err := checkFlow(r, service, "load", "op", flow) // warm caches; one check alone passes
	require.NoError(t, err)

	const burst = 24
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		ok, busy   int
		other      []error
		authTimes  []time.Duration
		burstStart = make(chan struct{})
	)
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-burstStart
			_, err := checkFlow(r, service, "load", "op", flow)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case status.Code(err) == codes.ResourceExhausted:
				reason, _ := errs.Reason(err)
				if reason != commonv1.ErrorReason_ERROR_REASON_OVERLOADED {
					other = append(other, err)
				}
				busy++
			default:
				other = append(other, err)
			}
		}()
	}
	close(burstStart)
	// While the burst runs: the cheap call roleset and billing make on every request.
	authDone := make(chan struct{})
	go func() {
		defer close(authDone)
		for i := 0; i < 10; i++ {
			start := time.Now()
			_, err := r.tok.Authenticate(service, &policyv1.AuthenticateRequest{Token: tok})
			d := time.Since(start)
			mu.Lock()
			if err != nil {
				other = append(other, err)
			}
			authTimes = append(authTimes, d)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-authDone
	require.Empty(t, other, "a burst answers OK or OVERLOADED, nothing else, and Authenticate answers")
	require.Positive(t, ok, "the bound admits checks")
	require.Positive(t, busy, "the bound refuses the excess")
	sort.Slice(authTimes, func(i, j int) bool { return authTimes[i] < authTimes[j] })
	t.Logf("burst of %d checks of %d bytes: %d answered, %d OVERLOADED; Authenticate during the burst: median %v, max %v",
		burst, len(flow), ok, busy, authTimes[len(authTimes)/2], authTimes[len(authTimes)-1])
	require.Less(t, authTimes[len(authTimes)-1], time.Second, "Authenticate stays responsive during the burst")
}

// Findings and lists are capped per answer, with counts of the rest, and over-long references are
// refused before any lookup (issue 11 item 1: a flow with 3,200 raw scripts 60 loops deep made
// 3,200 ErrorInfos, each with a 1 KB pointer; a 36 KB app key made one reference per ':').
func TestBuilderAnswersBounded(t *testing.T) {
	r := replicaWith(t, "cap")
	member(t, r, "cap", "op", policyv1.Role_ROLE_OPERATOR)
	member(t, r, "cap", "dev", policyv1.Role_ROLE_DEVELOPER)
	setBuilder(t, r, "cap", true)
	flow := string(buildertest.FlowDeepRawscripts(16)) // 3,200 findings

	_, err := checkFlow(r, service, "cap", "op", flow)
	requireCode(t, err, codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_INLINE_CODE)
	infos := errs.Infos(err)
	require.Len(t, infos, 100)
	require.Equal(t, "3100", infos[0].GetMetadata()["omitted"])
	require.Contains(t, status.Convert(err).Message(), "3200 violation(s) (the first 100 are listed)")
	size := 0
	for _, in := range infos {
		size += proto.Size(in)
	}
	require.Less(t, size, 1<<20)

	resp, err := checkFlow(r, service, "cap", "dev", flow)
	require.NoError(t, err)
	require.Len(t, resp.GetCodeFindings(), 100)
	require.EqualValues(t, 3100, resp.GetCodeFindingsOmitted())
	require.Less(t, proto.Size(resp), 1<<20)

	// A triggerable key over 1 KiB is refused as too large, naming the limit, before any lookup.
	key := "c:" + strings.Repeat("script/a:", 120) + "script/f/a/x"
	_, err = policyv1.NewBuilderServiceClient(r.conn).CheckApp(service, &policyv1.CheckAppRequest{Workspace: "cap", OnBehalfOf: "op",
		AppValueJson: `{}`, PolicyJson: `{"triggerables_v2":{"` + key + `":{}}}`, DeployPath: policyv1.DeployPath_DEPLOY_PATH_VALUE})
	requireCode(t, err, codes.InvalidArgument, commonv1.ErrorReason_ERROR_REASON_VALUE_TOO_LARGE)
	require.Contains(t, status.Convert(err).Message(), "the limit is 1024")
}
