package api

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/millwright/millwright/pkg/errs"
	commonv1 "github.com/millwright/millwright/pkg/gen/millwright/common/v1"
	"github.com/millwright/millwright/services/policy/internal/rulebook"
)

// mapErr turns domain errors into gRPC status errors. Anything else (a pgx error, a status)
// passes through for the server's RewriteError.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var nf *rulebook.NotFoundError
	var tagErr *rulebook.TagError
	var unread *rulebook.UnreadableError
	switch {
	case errors.As(err, &nf):
		return errs.New(codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, nf.Error(),
			map[string]string{"kind": nf.Kind, "name": nf.Name})
	case errors.Is(err, rulebook.ErrNotMember):
		return errs.New(codes.NotFound, commonv1.ErrorReason_ERROR_REASON_NOT_FOUND, "not a member of the workspace",
			map[string]string{"kind": "member"})
	case errors.Is(err, rulebook.ErrMemberDisabled):
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_MEMBER_DISABLED, "member is disabled", nil)
	case errors.Is(err, rulebook.ErrHashTaken):
		return errs.New(codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS,
			"a version hash already belongs to another script path", map[string]string{"field": "version_hashes"})
	case errors.Is(err, rulebook.ErrAlreadyExists):
		return errs.New(codes.AlreadyExists, commonv1.ErrorReason_ERROR_REASON_ALREADY_EXISTS, err.Error(), nil)
	case errors.Is(err, rulebook.ErrWrongWorkspace):
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_WRONG_WORKSPACE, err.Error(), nil)
	case errors.Is(err, rulebook.ErrBadCredential):
		return errs.New(codes.Unauthenticated, commonv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, err.Error(), nil)
	case errors.Is(err, rulebook.ErrBuilderOff):
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_BUILDER_RIGHTS_OFF,
			"Operators cannot build flows or apps in this workspace", nil)
	case errors.Is(err, rulebook.ErrLastAdmin):
		return errs.New(codes.FailedPrecondition, commonv1.ErrorReason_ERROR_REASON_LAST_ADMIN, err.Error(), nil)
	case errors.Is(err, rulebook.ErrPermissionedAs):
		return errs.InvalidField("permissioned_as", "parent", err.Error())
	case errors.Is(err, rulebook.ErrCredentialNeeded):
		return errs.InvalidField("credential", "required", err.Error())
	case errors.Is(err, rulebook.ErrCredentialUnused):
		return errs.InvalidField("credential", "must_be_empty", err.Error())
	case errors.As(err, &tagErr):
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_TAG_NOT_ALLOWED, tagErr.Error(),
			map[string]string{"tag": tagErr.Tag, "rule": tagErr.Reason})
	case errors.As(err, &unread):
		return errs.New(codes.PermissionDenied, commonv1.ErrorReason_ERROR_REASON_PATH_NOT_READABLE, unread.Error(),
			map[string]string{"kind": string(unread.Ref.Kind), "path": unread.Ref.Path})
	}
	return err
}

// taken is err, except that a create finding its key taken answers errs.AlreadyExists naming
// the existing resource (docs/conventions.md, "Creates are safe to retry").
func taken(err error, kind, key string) error {
	if errors.Is(err, rulebook.ErrAlreadyExists) {
		return errs.AlreadyExists(kind, key, kind+" "+key+" already exists: read it back with Get")
	}
	return err
}
