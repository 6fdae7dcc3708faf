/*-------------------------------------------------------------------------
 *
 * outbox_api.c
 *		The SQL-callable functions of the core API: append, claim, complete,
 *		fail, extend, retry_dead, purge, consume_once and the envelope.
 *
 * Each function checks every argument first (outbox_validate.c), reads the
 * wall clock once, and hands the work to the store (outbox_store.c,
 * outbox_store_claim.c).  A call that fails a check has run no statement
 * and changed nothing.  The routes have their own SQL functions
 * (outbox_api_routes.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_store.h"
#include "outbox_subs.h"
#include "outbox_uuid.h"
#include "outbox_validate.h"

PG_FUNCTION_INFO_V1(outbox_append);
PG_FUNCTION_INFO_V1(outbox_append_batch);
PG_FUNCTION_INFO_V1(outbox_claim);
PG_FUNCTION_INFO_V1(outbox_complete);
PG_FUNCTION_INFO_V1(outbox_complete_many);
PG_FUNCTION_INFO_V1(outbox_complete_and_claim);
PG_FUNCTION_INFO_V1(outbox_fail);
PG_FUNCTION_INFO_V1(outbox_extend);
PG_FUNCTION_INFO_V1(outbox_retry_dead);
PG_FUNCTION_INFO_V1(outbox_retry_dead_topic);
PG_FUNCTION_INFO_V1(outbox_purge);
PG_FUNCTION_INFO_V1(outbox_consume_once);
PG_FUNCTION_INFO_V1(outbox_envelope);
PG_FUNCTION_INFO_V1(outbox_envelope_by_id);

static text *obx_ordering_key(FunctionCallInfo fcinfo, int argno);
static void obx_claim_request(FunctionCallInfo fcinfo, int argno,
							  ClaimRequest *req);

/*
 * The ordering key of an append: argument argno, checked as a name; NULL
 * when not given, or when the function is the one of 1.0 or 1.1 (a
 * database not yet updated), which has no such argument.
 */
static text *
obx_ordering_key(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return CheckName(PG_GETARG_DATUM(argno), false, "ordering_key");
}

/*
 * outbox.append(topic, type, payload, id, available_at, ordering_key)
 * returns uuid
 *
 * Appends a message in the caller's transaction; with a given id, a repeat
 * with the same content is a no-op that returns the id.  A message whose
 * available_at is still ahead is deferred (read by its available_at, see
 * the deferred column); one due already, whatever available_at says, is
 * fresh: it is read from the topic's stream like a message appended
 * without one, and its completion stays a HOT update.  SECURITY INVOKER:
 * the call switches to the function's owner itself (outbox_identity.c).
 */
Datum
outbox_append(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *type = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "type");
	Jsonb	   *payload;
	pg_uuid_t  *id;
	TimestampTz available_at;
	bool		deferred;
	text	   *key;
	SavedIdentity caller;

	CheckNotNull(PG_ARGISNULL(2), "payload");
	payload = PG_GETARG_JSONB_P(2);
	available_at = CheckAvailableAt(PG_GETARG_DATUM(4), PG_ARGISNULL(4), now);
	deferred = available_at > now;
	key = obx_ordering_key(fcinfo, 5);

	IdentityBecomeFunctionOwner(fcinfo, &caller);
	if (PG_ARGISNULL(3))
	{
		id = palloc(sizeof(pg_uuid_t));
		GenerateUuidV7(id);
		StoreAppendNew(topic, type, payload, id, available_at, deferred, key);
	}
	else
	{
		id = PG_GETARG_UUID_P(3);
		StoreAppend(topic, type, payload, id, available_at, deferred, key);
	}
	WakeWorkerForTopic(topic);
	IdentityRestore(&caller);
	PG_RETURN_UUID_P(id);
}

/*
 * outbox.append_batch(topic, type, payloads jsonb[]) returns setof uuid
 *
 * One message per element, in array order, with increasing new ids.
 */
Datum
outbox_append_batch(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *type = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "type");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *payloads;
	text	   *key;
	Datum	   *ids;
	int			n;
	int			i;

	payloads = CheckArray(PG_GETARG_DATUM(2), PG_ARGISNULL(2), "payloads",
						  JSONBOID, &n);
	key = obx_ordering_key(fcinfo, 3);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (n == 0)
		PG_RETURN_NULL();

	ids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		pg_uuid_t  *id = palloc(sizeof(pg_uuid_t));

		GenerateUuidV7(id);
		ids[i] = UUIDPGetDatum(id);
	}

	StoreAppendBatch(topic, type,
					 construct_array(ids, n, UUIDOID, UUID_LEN, false,
									 TYPALIGN_CHAR),
					 payloads, now, key);
	WakeWorkerForTopic(topic);

	for (i = 0; i < n; i++)
	{
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &ids[i], &isnull);
	}
	PG_RETURN_NULL();
}

/*
 * The claim of a call whose arguments from argno on are claim's: owner,
 * topic, batch_size, lease_seconds, each checked; now is taken here.
 */
static void
obx_claim_request(FunctionCallInfo fcinfo, int argno, ClaimRequest *req)
{
	req->now = GetCurrentTimestamp();
	req->owner = CheckName(PG_GETARG_DATUM(argno), PG_ARGISNULL(argno), "owner");
	req->topic = PG_ARGISNULL(argno + 1) ? NULL :
		CheckName(PG_GETARG_DATUM(argno + 1), false, "topic");
	req->batch_size = CheckBatchSize(PG_GETARG_DATUM(argno + 2),
									 PG_ARGISNULL(argno + 2));
	req->lease_seconds = CheckLeaseSeconds(PG_GETARG_DATUM(argno + 3),
										   PG_ARGISNULL(argno + 3));
	req->max_attempts = outbox_max_attempts;
	req->by_route = false;
	req->across = false;
	req->no_wait = false;
}

/*
 * outbox.claim(owner, topic, batch_size, lease_seconds) returns setof
 * outbox.message
 */
Datum
outbox_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ClaimRequest req;

	text	   *sub;

	obx_claim_request(fcinfo, 0, &req);
	sub = CheckSubscription(fcinfo, 4);
	if (sub != NULL)
		CheckSubscriptionClaim(req.topic, sub);
	else
		CheckDefaultClaim(req.topic);
	InitMaterializedSRF(fcinfo, 0);
	if (sub != NULL && req.topic == NULL)
		SubsClaimAcross(&req, sub, rsinfo->setDesc, rsinfo->setResult);
	else if (sub != NULL)
		SubsClaimToTuplestore(&req, sub, rsinfo->setDesc, rsinfo->setResult);
	else if (req.topic == NULL || !SubsDefaultHeld(req.topic, req.now, NULL))
		StoreClaimToTuplestore(&req, rsinfo->setDesc, rsinfo->setResult);
	PG_RETURN_NULL();
}

/* outbox.complete(id, owner) returns boolean */
Datum
outbox_complete(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = CheckUuid(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	text	   *sub = CheckSubscription(fcinfo, 2);

	if (sub != NULL)
		PG_RETURN_BOOL(SubsComplete(id, owner, sub));
	PG_RETURN_BOOL(StoreComplete(id, owner, now));
}

/* outbox.complete_many(ids, owner) returns integer */
Datum
outbox_complete_many(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	ArrayType  *ids;
	text	   *owner;
	text	   *sub;
	int			n;

	ids = CheckArray(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "ids", UUIDOID, &n);
	owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	sub = CheckSubscription(fcinfo, 2);
	if (n == 0)
		PG_RETURN_INT32(0);

	if (sub != NULL)
		PG_RETURN_INT32((int32) SubsCompleteMany(ids, owner, sub));
	PG_RETURN_INT32((int32) StoreCompleteMany(ids, owner, now));
}

/*
 * outbox.complete_and_claim(ids, owner, topic, batch_size, lease_seconds)
 * returns setof outbox.message
 *
 * complete_many(ids, owner), then claim(owner, topic, batch_size,
 * lease_seconds), in one call: a pull worker's loop commits once per batch
 * instead of twice.  Every argument is checked before anything changes.
 * The claim reads this transaction's completions as done.
 */
Datum
outbox_complete_and_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ClaimRequest req;
	ArrayType  *ids;
	text	   *sub;
	int			n;

	ids = CheckArray(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "ids", UUIDOID, &n);
	obx_claim_request(fcinfo, 1, &req);
	sub = CheckSubscription(fcinfo, 5);
	if (sub != NULL)
		CheckSubscriptionClaim(req.topic, sub);
	else
		CheckDefaultClaim(req.topic);
	InitMaterializedSRF(fcinfo, 0);
	if (sub != NULL)
	{
		if (n > 0)
			(void) SubsCompleteMany(ids, req.owner, sub);
		if (req.topic == NULL)
			SubsClaimAcross(&req, sub, rsinfo->setDesc, rsinfo->setResult);
		else
			SubsClaimToTuplestore(&req, sub, rsinfo->setDesc, rsinfo->setResult);
		PG_RETURN_NULL();
	}
	if (n > 0)
		(void) StoreCompleteMany(ids, req.owner, req.now);
	if (req.topic == NULL || !SubsDefaultHeld(req.topic, req.now, NULL))
		StoreClaimToTuplestore(&req, rsinfo->setDesc, rsinfo->setResult);
	PG_RETURN_NULL();
}

/* outbox.fail(id, owner, error) returns boolean */
Datum
outbox_fail(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = CheckUuid(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	text	   *error = CheckErrorText(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	text	   *sub = CheckSubscription(fcinfo, 3);

	if (sub != NULL)
		PG_RETURN_BOOL(SubsFail(id, owner, error, sub, now));
	PG_RETURN_BOOL(StoreFail(id, owner, error, now));
}

/* outbox.extend(id, owner, lease_seconds) returns boolean */
Datum
outbox_extend(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = CheckUuid(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "id");
	text	   *owner = CheckName(PG_GETARG_DATUM(1), PG_ARGISNULL(1), "owner");
	int			lease = CheckLeaseSeconds(PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	text	   *sub = CheckSubscription(fcinfo, 3);

	if (sub != NULL)
		PG_RETURN_BOOL(SubsExtend(id, owner, lease, sub, now));
	PG_RETURN_BOOL(StoreExtend(id, owner, lease, now));
}

/* outbox.retry_dead(id) returns boolean */
Datum
outbox_retry_dead(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	pg_uuid_t  *id = CheckUuid(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "id");
	text	   *sub = CheckSubscription(fcinfo, 1);

	if (sub != NULL)
		PG_RETURN_BOOL(SubsRetryDead(id, sub, now));
	if (!StoreRetryDead(id, now))
		PG_RETURN_BOOL(false);
	WakeWorkerAtCommit();
	PG_RETURN_BOOL(true);
}

/* outbox.retry_dead_topic(topic) returns bigint */
Datum
outbox_retry_dead_topic(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *sub = CheckSubscription(fcinfo, 1);
	int64		revived;

	if (sub != NULL)
		PG_RETURN_INT64(SubsRetryDeadTopic(topic, sub, now));
	revived = StoreRetryDeadTopic(topic, now);

	if (revived > 0)
		WakeWorkerAtCommit();
	PG_RETURN_INT64(revived);
}

/*
 * outbox.purge(older_than, max_rows) returns bigint
 *
 * The horizon is now - older_than (default outbox.retention_days days).  A
 * horizon beyond the range of timestamps keeps everything.
 */
Datum
outbox_purge(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz horizon = CheckPurgeHorizon(PG_GETARG_DATUM(0),
											PG_ARGISNULL(0), now);
	int64		max_rows = CheckMaxRows(PG_GETARG_DATUM(1), PG_ARGISNULL(1));

	PG_RETURN_INT64(StorePurge(horizon, max_rows));
}

/* outbox.consume_once(consumer, message_id) returns boolean */
Datum
outbox_consume_once(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *consumer = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "consumer");
	pg_uuid_t  *message_id = CheckUuid(PG_GETARG_DATUM(1), PG_ARGISNULL(1),
									   "message_id");

	PG_RETURN_BOOL(StoreConsumeOnce(consumer, message_id, now));
}

/* outbox.envelope(m outbox.message) returns jsonb */
Datum
outbox_envelope(PG_FUNCTION_ARGS)
{
	HeapTupleHeader row;
	static const char *const cols[] = {"id", "event_type", "created_at", "payload"};
	Datum		v[4];
	int			i;

	CheckNotNull(PG_ARGISNULL(0), "message");
	row = PG_GETARG_HEAPTUPLEHEADER(0);
	for (i = 0; i < lengthof(cols); i++)
	{
		bool		isnull;

		v[i] = GetAttributeByName(row, cols[i], &isnull);
		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("message %s must not be null", cols[i])));
	}

	PG_RETURN_JSONB_P(BuildEnvelope(DatumGetUUIDP(v[0]), DatumGetTextPP(v[1]),
									DatumGetTimestampTz(v[2]),
									DatumGetJsonbP(v[3])));
}

/*
 * May the caller of envelope_by_id read any message?  Only a role that may
 * read outbox.message itself.  The function runs as the extension owner,
 * so the caller is the role of the session (SET ROLE included).
 */
static bool
obx_caller_reads_messages(void)
{
	Oid			relid = get_relname_relid("message",
										  get_namespace_oid("outbox", false));

	return OidIsValid(relid) &&
		pg_class_aclcheck(relid, GetOuterUserId(), ACL_SELECT) == ACLCHECK_OK;
}

/*
 * outbox.envelope_by_id(id) returns jsonb, NULL when there is no such message
 *
 * For listeners of NOTIFY routes that received a truncated envelope: a
 * role that may not read outbox.message gets only the envelopes of topics
 * routed to a channel, which any role that may LISTEN receives anyway;
 * for the other messages (pull topics, remote routes) it gets NULL, as for
 * an id that does not exist.
 */
Datum
outbox_envelope_by_id(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *id = CheckUuid(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "id");
	EnvelopeRow row;

	if (!obx_caller_reads_messages() && !StoreMessageOnChannel(id))
		PG_RETURN_NULL();
	if (!StoreEnvelopeById(id, &row))
		PG_RETURN_NULL();
	PG_RETURN_JSONB_P(BuildEnvelope(&row.id, row.event_type, row.created_at,
									row.payload));
}
