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

static SavedStatement stmt_secrets_set = {
	"INSERT INTO outbox.route_secrets (topic, secret, headers) VALUES ($1, $2, $3) "
	"ON CONFLICT (topic) DO UPDATE SET secret = excluded.secret,"
	" previous_secret = NULL, previous_until = NULL, headers = excluded.headers",
	SPI_OK_INSERT,
	3, {TEXTOID, TEXTOID, JSONBOID},
	OBX_SCANS_ANY
};

static SavedStatement stmt_secrets_drop = {
	"DELETE FROM outbox.route_secrets WHERE topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_DELETE,
	1, {TEXTOID}
};

/* the route must be an HTTP route: the UPDATE of routes says whether */
static SavedStatement stmt_rotate_route = {
	"UPDATE outbox.routes SET secret_fingerprint = $2 "
	"WHERE topic OPERATOR(pg_catalog.=) $1 AND target OPERATOR(pg_catalog.=) 'http'",
	SPI_OK_UPDATE,
	2, {TEXTOID, TEXTOID}
};

/* the old secret signs on only if there was one */
static SavedStatement stmt_rotate_secret = {
	"INSERT INTO outbox.route_secrets (topic, secret) VALUES ($1, $2) "
	"ON CONFLICT (topic) DO UPDATE SET secret = excluded.secret,"
	" previous_secret = outbox.route_secrets.secret,"
	" previous_until = CASE WHEN outbox.route_secrets.secret IS NULL THEN NULL ELSE $3 END",
	SPI_OK_INSERT,
	3, {TEXTOID, TEXTOID, TIMESTAMPTZOID},
	OBX_SCANS_ANY
};

static SavedStatement stmt_secrets_get = {
	"SELECT secret, previous_secret, previous_until,"
	" ARRAY(SELECT h.key OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) h.value"
	"  FROM pg_catalog.jsonb_each_text(s.headers) h ORDER BY h.key) "
	"FROM outbox.route_secrets s WHERE s.topic OPERATOR(pg_catalog.=) $1",
	SPI_OK_SELECT,
	1, {TEXTOID}
};

static SavedStatement stmt_count = {
	"INSERT INTO outbox.route_http_stats AS s (topic, calls_2xx, calls_3xx, calls_4xx,"
	" calls_5xx, calls_failed, latency_seconds_total, last_status, last_latency_ms, last_call_at) "
	"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
	"ON CONFLICT (topic) DO UPDATE SET calls_2xx = s.calls_2xx OPERATOR(pg_catalog.+) excluded.calls_2xx,"
	" calls_3xx = s.calls_3xx OPERATOR(pg_catalog.+) excluded.calls_3xx,"
	" calls_4xx = s.calls_4xx OPERATOR(pg_catalog.+) excluded.calls_4xx,"
	" calls_5xx = s.calls_5xx OPERATOR(pg_catalog.+) excluded.calls_5xx,"
	" calls_failed = s.calls_failed OPERATOR(pg_catalog.+) excluded.calls_failed,"
	" latency_seconds_total = s.latency_seconds_total OPERATOR(pg_catalog.+) excluded.latency_seconds_total,"
	" last_status = excluded.last_status, last_latency_ms = excluded.last_latency_ms,"
	" last_call_at = excluded.last_call_at",
	SPI_OK_INSERT,
	10, {TEXTOID, INT8OID, INT8OID, INT8OID, INT8OID, INT8OID, FLOAT8OID, INT4OID,
		FLOAT8OID, TIMESTAMPTZOID},
	OBX_SCANS_ANY
};

/* Whether the tables of HTTP routes exist (version 1.3 and later). */
static bool
obx_have_secrets(void)
{
	Oid			nsp = get_namespace_oid("outbox", true);

	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("route_secrets", nsp));
}

/* Keep the secret (NULL: none) and headers (NULL: none) of topic's route. */
void
StoreHttpSetSecrets(text *topic, const char *secret, Jsonb *headers)
{
	Datum		args[3];
	char		nulls[3] = {' ', ' ', ' '};

	args[0] = PointerGetDatum(topic);
	args[1] = secret ? CStringGetTextDatum(secret) : (Datum) 0;
	nulls[1] = secret ? ' ' : 'n';
	args[2] = headers ? JsonbPGetDatum(headers) : (Datum) 0;
	nulls[2] = headers ? ' ' : 'n';
	(void) SpiRun(&stmt_secrets_set, args, nulls);
}

/* Forget the secrets of topic's route (tables older than 1.3 have none). */
void
StoreHttpDropSecrets(text *topic)
{
	Datum		args[1];

	if (!obx_have_secrets())
		return;
	args[0] = PointerGetDatum(topic);
	(void) SpiRun(&stmt_secrets_drop, args, NULL);
}

/*
 * Sign topic's HTTP route with secret from now on, and with its secret of
 * before as well until keep_until.  Raises 42704 when topic has no HTTP
 * route.
 */
void
StoreHttpRotateSecret(text *topic, const char *secret, const char *fingerprint,
					  TimestampTz keep_until)
{
	Datum		args[3];

	args[0] = PointerGetDatum(topic);
	args[1] = CStringGetTextDatum(fingerprint);
	if (!obx_have_secrets() || SpiRun(&stmt_rotate_route, args, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("topic \"%s\" has no HTTP route", text_to_cstring(topic)),
				 errhint("Make one with outbox.route_http.")));
	args[1] = CStringGetTextDatum(secret);
	args[2] = TimestampTzGetDatum(keep_until);
	(void) SpiRun(&stmt_rotate_secret, args, NULL);
}

/*
 * The secrets and headers of topic's HTTP route, in the current memory
 * context.  A route without a row (written into outbox.routes by hand)
 * signs nothing and sends no headers of its own.
 */
HttpRouteSecrets *
StoreHttpSecrets(const char *topic)
{
	MemoryContext caller = CurrentMemoryContext;
	HttpRouteSecrets *s = palloc0(sizeof(HttpRouteSecrets));
	Datum		args[1];

	s->previous_until = DT_NOBEGIN;
	if (!obx_have_secrets())
		return s;
	args[0] = CStringGetTextDatum(topic);
	SpiConnect();
	if (SpiExecute(&stmt_secrets_get, args, NULL, true, 1) == 1)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
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

/* Add the counts of one batch to topic's counters (1.3 tables only). */
void
StoreHttpCount(const char *topic, const HttpRouteCounts *c)
{
	Datum		args[10];
	char		nulls[10];

	if (!obx_have_secrets())
		return;
	memset(nulls, ' ', sizeof(nulls));
	args[0] = CStringGetTextDatum(topic);
	for (int i = 2; i <= 5; i++)
		args[i - 1] = Int64GetDatum(c->calls[i]);
	args[5] = Int64GetDatum(c->calls[0]);
	args[6] = Float8GetDatum(c->latency_seconds);
	args[7] = Int32GetDatum(c->last_status);
	nulls[7] = c->last_status == 0 ? 'n' : ' ';
	args[8] = Float8GetDatum(c->last_latency_ms);
	args[9] = TimestampTzGetDatum(c->last_call_at);
	nulls[9] = c->last_call_at == 0 ? 'n' : ' ';
	(void) SpiRun(&stmt_count, args, nulls);
}
