"""DescribeUserScramCredentials and AlterUserScramCredentials, with Kafka's rules and errors.

Credentials are read and changed through the broker's ``ScramCredentialStore``
(``core.server.scram_credentials``); a stored change reaches every SASL listener's SCRAM
server at once. Both APIs see run-time credentials only: the ``user_<name>`` accounts of a
SCRAM JAAS entry are static configuration, neither listed nor deletable here (a run-time
credential of the same user wins over them at login; see ``core.server.sasl``).

Kafka's checks, in Kafka's order (its ZooKeeper-mode admin manager):

- Describe (DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the request):
  no users (null or empty) lists every user with a credential; an empty name or a user
  without a credential is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE.
- Alter (ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user named): an
  empty user name or iterations outside [4096, 16384] are UNACCEPTABLE_CREDENTIAL, a
  mechanism other than SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM;
  a (user, mechanism) changed twice is DUPLICATE_RESOURCE; deleting a credential that does
  not exist is RESOURCE_NOT_FOUND. Any of these fails every change of that user; the other
  users' changes apply. tierlog also refuses an empty salt or salted password
  (UNACCEPTABLE_CREDENTIAL), which Kafka would store as a credential nobody can use.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from core.server.api_keys import ApiKey
from core.server.authorizer import Operation
from core.server.handler_support import (
    NO_THROTTLE,
    BrokerServices,
    Handler,
    cluster_allowed,
    error_of,
)
from core.server.kio_build import make, nested
from core.server.protocol import RequestContext
from core.server.sasl import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from core.server.scram_credentials import UserChange

log = logging.getLogger(__name__)


class ScramMechanism(enum.IntEnum):
    """Kafka's ScramMechanism type bytes."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


MECHANISM_NAMES = {
    ScramMechanism.SCRAM_SHA_256: SCRAM_SHA_256,
    ScramMechanism.SCRAM_SHA_512: SCRAM_SHA_512,
}
MECHANISM_TYPES = {name: mechanism for mechanism, name in MECHANISM_NAMES.items()}
# Kafka's ScramMechanism minimum (both mechanisms) and its admin manager's maximum.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

EMPTY_USER = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"


def _mechanism_name(value: int) -> str | None:
    try:
        return MECHANISM_NAMES.get(ScramMechanism(value))
    except ValueError:
        return None


# -- DescribeUserScramCredentials ---------------------------------------------------------------
async def handle_describe_user_scram_credentials(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "DescribeUserScramCredentialsResult")
    info_cls = nested(response_type, "CredentialInfo")

    def answer(error: ErrorCode, message: str | None, results: tuple[Any, ...]) -> Any:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            results=results,
        )

    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return answer(ErrorCode.cluster_authorization_failed, None, ())
    store = broker.scram_credentials
    loop = asyncio.get_running_loop()

    def result(user: str, error: ErrorCode, message: str | None, creds: Any = None) -> Any:
        infos = tuple(
            make(info_cls, mechanism=int(MECHANISM_TYPES[m]), iterations=c.iterations)
            for m, c in sorted((creds or {}).items(), key=lambda mc: MECHANISM_TYPES[mc[0]])
        )
        return make(
            result_cls, user=user, error_code=error, error_message=message, credential_infos=infos
        )

    wanted = [u.name for u in request.users] if request.users else []
    if not wanted:
        everyone = await loop.run_in_executor(None, store.users)
        return answer(
            ErrorCode.none,
            None,
            tuple(result(user, ErrorCode.none, None, creds) for user, creds in everyone.items()),
        )
    counts = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):  # each user once, in request order
        if not user:
            results.append(result(user, ErrorCode.resource_not_found, EMPTY_USER))
        elif counts[user] > 1:
            message = (
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}"
            )
            results.append(result(user, ErrorCode.duplicate_resource, message))
        else:
            creds = await loop.run_in_executor(None, store.user, user)
            if creds:
                results.append(result(user, ErrorCode.none, None, creds))
            else:
                message = f"Attempt to describe a user credential that does not exist: {user}"
                results.append(result(user, ErrorCode.resource_not_found, message))
    return answer(ErrorCode.none, None, tuple(results))


# -- AlterUserScramCredentials ------------------------------------------------------------------
def _upsertion_problem(upsertion: Any) -> tuple[ErrorCode, str] | None:
    if not upsertion.name:
        return ErrorCode.unacceptable_credential, EMPTY_USER
    if _mechanism_name(upsertion.mechanism) is None:
        return ErrorCode.unsupported_sasl_mechanism, UNKNOWN_MECHANISM
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if not upsertion.salt:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    if not upsertion.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return None


def _deletion_problem(deletion: Any) -> tuple[ErrorCode, str] | None:
    if not deletion.name:
        return ErrorCode.unacceptable_credential, EMPTY_USER
    if _mechanism_name(deletion.mechanism) is None:
        return ErrorCode.unsupported_sasl_mechanism, UNKNOWN_MECHANISM
    return None


async def handle_alter_user_scram_credentials(
    broker: BrokerServices, ctx: RequestContext, request: Any
) -> Any:
    response_type = broker.codec.response_type(ctx.api_key, ctx.api_version)
    result_cls = nested(response_type, "AlterUserScramCredentialsResult")
    outcome: dict[str, tuple[ErrorCode, str | None]] = {}

    def answer() -> Any:
        return make(
            response_type,
            throttle_time=NO_THROTTLE,
            results=tuple(
                make(result_cls, user=user, error_code=error, error_message=message)
                for user, (error, message) in outcome.items()
            ),
        )

    upsertions, deletions = list(request.upsertions), list(request.deletions)
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        for user in sorted({c.name for c in upsertions + deletions}):
            outcome[user] = (ErrorCode.cluster_authorization_failed, None)
        return answer()

    # Malformed changes: an upsertion's problem is the one reported when a user has both.
    for deletion in deletions:
        problem = _deletion_problem(deletion)
        if problem is not None:
            outcome[deletion.name] = problem
    for upsertion in upsertions:
        problem = _upsertion_problem(upsertion)
        if problem is not None:
            outcome[upsertion.name] = problem
    pairs = Counter((c.name, c.mechanism) for c in upsertions + deletions if c.name not in outcome)
    for (user, _), count in pairs.items():
        if count > 1:
            message = "A user credential cannot be altered twice in the same request"
            outcome[user] = (ErrorCode.duplicate_resource, message)

    store = broker.scram_credentials
    loop = asyncio.get_running_loop()
    changes: dict[str, dict[str, ScramCredential | None]] = {}
    for deletion in deletions:
        if deletion.name in outcome:
            continue
        mechanism = _mechanism_name(deletion.mechanism)
        assert mechanism is not None
        current = await loop.run_in_executor(None, store.user, deletion.name)
        if mechanism not in current:
            message = "Attempt to delete a user credential that does not exist"
            outcome[deletion.name] = (ErrorCode.resource_not_found, message)
            changes.pop(deletion.name, None)
            continue
        changes.setdefault(deletion.name, {})[mechanism] = None
    for upsertion in upsertions:
        if upsertion.name in outcome:
            continue
        mechanism = _mechanism_name(upsertion.mechanism)
        assert mechanism is not None
        changes.setdefault(upsertion.name, {})[mechanism] = ScramCredential.from_salted_password(
            mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
        )
    valid: dict[str, UserChange] = {u: c for u, c in changes.items() if u not in outcome}
    if valid:
        stored = await loop.run_in_executor(None, store.alter, valid)
        for user, error in stored.items():
            if error is None:
                outcome[user] = (ErrorCode.none, None)
                log.info(
                    "SCRAM credentials of user %s altered: %s",
                    user,
                    ", ".join(
                        f"{m} {'deleted' if c is None else 'set'}"
                        for m, c in sorted(valid[user].items())
                    ),
                )
            else:
                outcome[user] = (error_of(error), str(error))
    return answer()


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
