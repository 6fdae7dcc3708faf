/*-------------------------------------------------------------------------
 *
 * outbox_store_http.c
 *		The statements on outbox.route_secrets and outbox.route_http_stats:
 *		what an HTTP route signs with and the headers it sends, and the
 *		counters of its calls.
 *
 * The secrets are kept apart from outbox.routes so that a role that may
 * read the routes reads no secret: only the extension's owner reads
 * outbox.route_secrets, and these statements run as that owner.  A route
 * set to another target, or removed, takes its secrets along
 * (StoreHttpDropSecrets); its counters stay, as counters do.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "catalog/namespace.h"

#include "outbox_spi.h"
#include "outbox_store_routes.h"

/*
 * Each statement twice: for the tables of 1.3 and 1.4, one route per topic,
 * and for those of 1.5, one per topic and subscription ($2, NULL: the
 * default one), chosen by StoreRoutesPerSubscription().
 */
#define SECRETS_SET(cols, vals, key) \
	"INSERT INTO outbox.route_secrets (" cols ", secret, headers) VALUES (" vals ") " \
	"ON CONFLICT (" key ") DO UPDATE SET secret = excluded.secret," \
	" previous_secret = NULL, previous_until = NULL, headers = excluded.headers"

SAVED_STATEMENTS(stmt_secrets_set, 2) = {
	{SECRETS_SET("topic", "$1, $3, $4", "topic"), SPI_OK_INSERT,
	 4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}, OBX_SCANS_ANY},
	{SECRETS_SET("topic, subscription", "$1, $2, $3, $4", "topic, subscription"), SPI_OK_INSERT,
	 4, {TEXTOID, TEXTOID, TEXTOID, JSONBOID}, OBX_SCANS_ANY}
};

/* the route of $1 and $2 */
#define OF_ROUTE_V13 "topic OPERATOR(pg_catalog.=) $1"
#define OF_ROUTE_V15 "topic OPERATOR(pg_catalog.=) $1 AND subscription IS NOT DISTINCT FROM $2"

SAVED_STATEMENTS(stmt_secrets_drop, 2) = {
	{"DELETE FROM outbox.route_secrets WHERE " OF_ROUTE_V13 " AND $2 IS NULL",
	 SPI_OK_DELETE, 2, {TEXTOID, TEXTOID}},
	{"DELETE FROM outbox.route_secrets WHERE " OF_ROUTE_V15,
	 SPI_OK_DELETE, 2, {TEXTOID, TEXTOID}}
};

/* the route must be an HTTP route: the UPDATE of routes says whether */
#define ROTATE_ROUTE(of) \
	"UPDATE outbox.routes SET secret_fingerprint = $3 " \
	"WHERE " of " AND target OPERATOR(pg_catalog.=) 'http'"

SAVED_STATEMENTS(stmt_rotate_route, 2) = {
	{ROTATE_ROUTE(OF_ROUTE_V13 " AND $2 IS NULL"), SPI_OK_UPDATE, 3, {TEXTOID, TEXTOID, TEXTOID}},
	{ROTATE_ROUTE(OF_ROUTE_V15), SPI_OK_UPDATE, 3, {TEXTOID, TEXTOID, TEXTOID}}
};

/* the old secret signs on only if there was one */
#define ROTATE_SECRET(cols, vals, key) \
	"INSERT INTO outbox.route_secrets (" cols ", secret) VALUES (" vals ") " \
	"ON CONFLICT (" key ") DO UPDATE SET secret = excluded.secret," \
	" previous_secret = outbox.route_secrets.secret," \
	" previous_until = CASE WHEN outbox.route_secrets.secret IS NULL THEN NULL ELSE $4 END"

SAVED_STATEMENTS(stmt_rotate_secret, 2) = {
	{ROTATE_SECRET("topic", "$1, $3", "topic"), SPI_OK_INSERT,
	 4, {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_ANY},
	{ROTATE_SECRET("topic, subscription", "$1, $2, $3", "topic, subscription"), SPI_OK_INSERT,
	 4, {TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID}, OBX_SCANS_ANY}
};

#define SECRETS_GET(of) \
	"SELECT secret, previous_secret, previous_until," \
	" ARRAY(SELECT h.key OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) h.value" \
	"  FROM pg_catalog.jsonb_each_text(s.headers) h ORDER BY h.key) " \
	"FROM outbox.route_secrets s WHERE " of

SAVED_STATEMENTS(stmt_secrets_get, 2) = {
	{SECRETS_GET(OF_ROUTE_V13 " AND $2 IS NULL"), SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}},
	{SECRETS_GET(OF_ROUTE_V15), SPI_OK_SELECT, 2, {TEXTOID, TEXTOID}}
};

#define COUNT(cols, vals, key) \
	"INSERT INTO outbox.route_http_stats AS s (" cols ", calls_2xx, calls_3xx, calls_4xx," \
	" calls_5xx, calls_failed, latency_seconds_total, last_status, last_latency_ms, last_call_at) " \
	"VALUES (" vals ", $3, $4, $5, $6, $7, $8, $9, $10, $11) " \
	"ON CONFLICT (" key ") DO UPDATE SET calls_2xx = s.calls_2xx OPERATOR(pg_catalog.+) excluded.calls_2xx," \
	" calls_3xx = s.calls_3xx OPERATOR(pg_catalog.+) excluded.calls_3xx," \
	" calls_4xx = s.calls_4xx OPERATOR(pg_catalog.+) excluded.calls_4xx," \
	" calls_5xx = s.calls_5xx OPERATOR(pg_catalog.+) excluded.calls_5xx," \
	" calls_failed = s.calls_failed OPERATOR(pg_catalog.+) excluded.calls_failed," \
	" latency_seconds_total = s.latency_seconds_total OPERATOR(pg_catalog.+) excluded.latency_seconds_total," \
	" last_status = excluded.last_status, last_latency_ms = excluded.last_latency_ms," \
	" last_call_at = excluded.last_call_at"
#define COUNT_ARGTYPES \
	11, {TEXTOID, TEXTOID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, FLOAT8OID, INT4OID, \
		 FLOAT8OID, TIMESTAMPTZOID}

SAVED_STATEMENTS(stmt_count, 2) = {
	{COUNT("topic", "$1", "topic"), SPI_OK_INSERT, COUNT_ARGTYPES, OBX_SCANS_ANY},
	{COUNT("topic, subscription", "$1, $2", "topic, subscription"), SPI_OK_INSERT,
	 COUNT_ARGTYPES, OBX_SCANS_ANY}
};

/* Whether the tables of HTTP routes exist (version 1.3 and later). */
static bool
obx_have_secrets(void)
{
	Oid			nsp = get_namespace_oid("outbox", true);

	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("route_secrets", nsp));
}

/*
 * Which of each statement the tables take: 1 with routes per subscription;
 * 0 before, where a named subscription has no route
 */
static int
obx_v(void)
{
	return StoreRoutesPerSubscription() ? 1 : 0;
}

/* The route's topic and subscription (NULL: the default one) as $1 and $2 */
static void
obx_route_key(Datum *args, char *nulls, Datum topic, text *subscription)
{
	args[0] = topic;
	nulls[0] = ' ';
	args[1] = PointerGetDatum(subscription);
	nulls[1] = subscription ? ' ' : 'n';
}

/*
 * Keep the secret (NULL: none) and headers (NULL: none) of the route of
 * topic's subscription.
 */
void
StoreHttpSetSecrets(text *topic, text *subscription, const char *secret,
					Jsonb *headers)
{
	Datum		args[4];
	char		nulls[4];

	obx_route_key(args, nulls, PointerGetDatum(topic), subscription);
	args[2] = secret ? CStringGetTextDatum(secret) : (Datum) 0;
	nulls[2] = secret ? ' ' : 'n';
	args[3] = headers ? JsonbPGetDatum(headers) : (Datum) 0;
	nulls[3] = headers ? ' ' : 'n';
	(void) SpiRun(&stmt_secrets_set[obx_v()], args, nulls);
}

/*
 * Forget the secrets of the route of topic's subscription (tables older
 * than 1.3 have none).
 */
void
StoreHttpDropSecrets(text *topic, text *subscription)
{
	Datum		args[2];
	char		nulls[2];

	if (!obx_have_secrets())
		return;
	obx_route_key(args, nulls, PointerGetDatum(topic), subscription);
	(void) SpiRun(&stmt_secrets_drop[obx_v()], args, nulls);
}

/*
 * Sign the HTTP route of topic's subscription with secret from now on, and
 * with its secret of before as well until keep_until.  Raises 42704 when
 * there is no such route.
 */
void
StoreHttpRotateSecret(text *topic, text *subscription, const char *secret,
					  const char *fingerprint, TimestampTz keep_until)
{
	Datum		args[4];
	char		nulls[4];

	obx_route_key(args, nulls, PointerGetDatum(topic), subscription);
	args[2] = CStringGetTextDatum(fingerprint);
	nulls[2] = nulls[3] = ' ';
	if (!obx_have_secrets() ||
		(subscription != NULL && !StoreRoutesPerSubscription()) ||
		SpiRun(&stmt_rotate_route[obx_v()], args, nulls) == 0)
	{
		if (subscription == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("topic \"%s\" has no HTTP route", text_to_cstring(topic)),
					 errhint("Make one with outbox.route_http.")));
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("subscription \"%s\" of topic \"%s\" has no HTTP route",
						text_to_cstring(subscription), text_to_cstring(topic)),
				 errhint("Make one with outbox.route_http.")));
	}
	args[2] = CStringGetTextDatum(secret);
	args[3] = TimestampTzGetDatum(keep_until);
	(void) SpiRun(&stmt_rotate_secret[obx_v()], args, nulls);
}

/*
 * The secrets and headers of the HTTP route of topic's subscription (NULL:
 * the default one), in the current memory context.  A route without a row
 * (written into outbox.routes by hand) signs nothing and sends no headers
 * of its own.
 */
HttpRouteSecrets *
StoreHttpSecrets(const char *topic, const char *subscription)
{
	MemoryContext caller = CurrentMemoryContext;
	HttpRouteSecrets *s = palloc0(sizeof(HttpRouteSecrets));
	text	   *sub = subscription ? cstring_to_text(subscription) : NULL;
	Datum		args[2];
	char		nulls[2];

	s->previous_until = DT_NOBEGIN;
	if (!obx_have_secrets())
		return s;
	obx_route_key(args, nulls, CStringGetTextDatum(topic), sub);
	SpiConnect();
	if (SpiExecute(&stmt_secrets_get[obx_v()], args, nulls, true, 1) == 1)
	{		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		until;
		Datum		headers;
		MemoryContext spi = MemoryContextSwitchTo(caller);

		s->secret = SPI_getvalue(tup, desc, 1);
		s->previous_secret = SPI_getvalue(tup, desc, 2);
		until = SPI_getbinval(tup, desc, 3, &isnull);
		if (!isnull)
			s->previous_until = DatumGetTimestampTz(until);
		headers = SPI_getbinval(tup, desc, 4, &isnull);
		if (!isnull)
		{
			Datum	   *elems;
			bool	   *enulls;
			int			n;

			deconstruct_array(DatumGetArrayTypeP(headers), TEXTOID, -1, false,
							  TYPALIGN_INT, &elems, &enulls, &n);
			for (int i = 0; i < n; i++)
				if (!enulls[i])
					s->headers = lappend(s->headers, TextDatumGetCString(elems[i]));
		}
		MemoryContextSwitchTo(spi);
	}
	SpiFinish();
	return s;
}

/*
 * Add the counts of one batch to the counters of the route of topic's
 * subscription (1.3 tables and later).
 */
void
StoreHttpCount(const char *topic, const char *subscription,
			   const HttpRouteCounts *c)
{
	text	   *sub = subscription ? cstring_to_text(subscription) : NULL;
	Datum		args[11];
	char		nulls[11];

	if (!obx_have_secrets())
		return;
	memset(nulls, ' ', sizeof(nulls));
	obx_route_key(args, nulls, CStringGetTextDatum(topic), sub);
	for (int i = 2; i <= 5; i++)
		args[i] = Int64GetDatum(c->calls[i]);
	args[6] = Int64GetDatum(c->calls[0]);
	args[7] = Float8GetDatum(c->latency_seconds);
	args[8] = Int32GetDatum(c->last_status);
	nulls[8] = c->last_status == 0 ? 'n' : ' ';
	args[9] = Float8GetDatum(c->last_latency_ms);
	args[10] = TimestampTzGetDatum(c->last_call_at);
	nulls[10] = c->last_call_at == 0 ? 'n' : ' ';
	(void) SpiRun(&stmt_count[obx_v()], args, nulls);
}
