/*-------------------------------------------------------------------------
 *
 * outbox_api_subs.c
 *		The SQL-callable functions that manage named subscriptions:
 *		subscribe, unsubscribe, pause and resume; and the checks of a
 *		subscription argument that the core API shares.
 *
 * A NULL subscription is the topic's default one, which keeps its state in
 * outbox.message: unsubscribe drops it (purge stops waiting for it, claims
 * of it are refused), subscribe brings it back; pause and resume pause it
 * (its claims and its route take nothing meanwhile).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_stream.h"
#include "outbox_subs.h"
#include "outbox_wakeup.h"

PG_FUNCTION_INFO_V1(outbox_subscribe);
PG_FUNCTION_INFO_V1(outbox_unsubscribe);
PG_FUNCTION_INFO_V1(outbox_pause);
PG_FUNCTION_INFO_V1(outbox_resume);

/*
 * The subscription a call names in argument argno: NULL for the topic's
 * default one, also when the function is the one of 1.3 or earlier (a
 * database not yet updated), which has no such argument.
 */
text *
CheckSubscription(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return CheckName(PG_GETARG_DATUM(argno), false, "subscription");
}

/* outbox.subscribe(topic, subscription, since) returns boolean */
Datum
outbox_subscribe(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *name = CheckSubscription(fcinfo, 1);
	bool		since_given = !PG_ARGISNULL(2);
	TimestampTz since = since_given ? PG_GETARG_TIMESTAMPTZ(2) : 0;

	if (since_given && TIMESTAMP_IS_NOEND(since))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("since must not be infinity"),
				 errhint("Pass NULL to read the messages appended from now on.")));
	if (name == NULL)
		PG_RETURN_BOOL(SubsRestoreDefault(topic));
	PG_RETURN_BOOL(SubsCreate(topic, name, since_given, since, now));
}

/* outbox.unsubscribe(topic, subscription) returns boolean */
Datum
outbox_unsubscribe(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *name = CheckSubscription(fcinfo, 1);

	if (name == NULL)
		PG_RETURN_BOOL(SubsDropDefault(topic, GetCurrentTimestamp()));
	PG_RETURN_BOOL(SubsDrop(topic, name));
}

/* outbox.pause(topic, subscription, until) returns boolean */
Datum
outbox_pause(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *name = CheckSubscription(fcinfo, 1);

	CheckNotNull(PG_ARGISNULL(2), "until");
	if (name == NULL)
		PG_RETURN_BOOL(SubsPauseDefault(topic, true, PG_GETARG_TIMESTAMPTZ(2)));
	PG_RETURN_BOOL(SubsPause(topic, name, true, PG_GETARG_TIMESTAMPTZ(2)));
}

/* outbox.resume(topic, subscription) returns boolean */
Datum
outbox_resume(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *name = CheckSubscription(fcinfo, 1);
	bool		resumed;

	if (name != NULL)
		PG_RETURN_BOOL(SubsPause(topic, name, false, 0));

	/* a route of the default subscription delivers again from now */
	resumed = SubsPauseDefault(topic, false, 0);
	if (resumed)
		RoutesChangedAtCommit();
	PG_RETURN_BOOL(resumed);
}
