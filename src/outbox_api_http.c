/*-------------------------------------------------------------------------
 *
 * outbox_api_http.c
 *		The SQL-callable functions of HTTP routes: route_http, which
 *		delivers a topic (its default subscription, or from 1.5 the one
 *		named by a last argument) by POSTing each envelope to a URL, and
 *		rotate_http_secret.
 *
 * A route is checked on the way in, with nothing stored when it is
 * refused: the URL's form (outbox_http_call.c), the secret's
 * (outbox_http_sign.c), the headers and the CA file here.  Which addresses
 * the URL may reach is decided at each call, on the address connected to
 * (outbox_http_addr.c), not here: a name resolves anew every time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_http.h"
#include "outbox_store_routes.h"
#include "outbox_subs.h"
#include "outbox_validate.h"

PG_FUNCTION_INFO_V1(outbox_route_http);
PG_FUNCTION_INFO_V1(outbox_rotate_http_secret);

/* what a route's headers may hold */
#define HTTP_MAX_HEADERS		50
#define HTTP_MAX_HEADER_BYTES	8192

/* the headers the outbox sets itself, or that would change the request */
static const char *const obx_reserved_headers[] = {
	"content-type", "content-length", "host", "transfer-encoding",
	"connection", "expect", "te", "upgrade", "trailer", "keep-alive",
	"webhook-id", "webhook-timestamp", "webhook-signature", NULL
};

static void obx_check_headers(Jsonb *headers);
static void obx_check_header_name(const char *name, int len);
static char *obx_check_ca_file(text *ca_file, Oid caller);
static const char *obx_fingerprint(text *secret);

/*
 * outbox.route_http(topic, url, secret, headers, ca_file[, subscription]):
 * deliver topic (its subscription: NULL, the default one; a named one is
 * made when missing) by POSTing each envelope to url, signed with secret,
 * with headers, the server's certificate verified with ca_file (NULL: the
 * system's store).
 */
Datum
outbox_route_http(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	char	   *url;
	text	   *secret = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	Jsonb	   *headers = PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3);
	char	   *ca_file = NULL;
	text	   *subscription = CheckSubscription(fcinfo, 5);
	const char *fingerprint;

	CheckNotNull(PG_ARGISNULL(1), "url");
	url = text_to_cstring(PG_GETARG_TEXT_PP(1));
	HttpCheckUrl(url);
	fingerprint = obx_fingerprint(secret);
	if (headers != NULL)
		obx_check_headers(headers);
	if (!PG_ARGISNULL(4))
		ca_file = obx_check_ca_file(PG_GETARG_TEXT_PP(4), GetOuterUserId());

	SubsForRoute(topic, subscription);

	/* a SECURITY DEFINER function: the session's role made the route */
	StoreRouteSetHttp(topic, subscription, url, ca_file, fingerprint,
					  GetOuterUserId());
	if (secret == NULL && headers == NULL)
		StoreHttpDropSecrets(topic, subscription);
	else
		StoreHttpSetSecrets(topic, subscription,
							secret ? text_to_cstring(secret) : NULL, headers);
	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/*
 * outbox.rotate_http_secret(topic, new_secret, keep_old_for[, subscription]):
 * sign the HTTP route of topic (its subscription) with new_secret from now
 * on, and with the secret of before as well until keep_old_for has passed,
 * so that receivers can move to the new one.
 */
Datum
outbox_rotate_http_secret(PG_FUNCTION_ARGS)
{
	text	   *topic = CheckName(PG_GETARG_DATUM(0), PG_ARGISNULL(0), "topic");
	text	   *secret;
	Interval   *keep;
	TimestampTz until;
	const char *fingerprint;
	text	   *subscription = CheckSubscription(fcinfo, 3);

	CheckNotNull(PG_ARGISNULL(1), "new_secret");
	CheckNotNull(PG_ARGISNULL(2), "keep_old_for");
	secret = PG_GETARG_TEXT_PP(1);
	keep = PG_GETARG_INTERVAL_P(2);
	fingerprint = obx_fingerprint(secret);
	if (ObxIntervalIsInfinite(keep) || keep->time < 0 || keep->day < 0 ||
		keep->month < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep_old_for must be a finite interval of zero or more")));
	until = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
													IntervalPGetDatum(keep)));
	StoreHttpRotateSecret(topic, subscription, text_to_cstring(secret), fingerprint,
						  until);
	RoutesChangedAtCommit();
	PG_RETURN_VOID();
}

/* The fingerprint of secret, checking its form; NULL for no secret. */
static const char *
obx_fingerprint(text *secret)
{
	if (secret == NULL)
		return NULL;
	return WebhookSecretFingerprint(text_to_cstring(secret));
}

/*
 * A route's headers: an object of strings, each name an HTTP token that the
 * outbox does not set itself, each value free of line breaks.
 */
static void
obx_check_headers(Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n = 0;
	int			bytes = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("headers must be a JSON object"),
				 errhint("Pass an object of header names and string values, such as '{\"Authorization\": \"Bearer ...\"}'.")));

	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			obx_check_header_name(v.val.string.val, v.val.string.len);
			bytes += v.val.string.len;
			n++;
		}
		else if (tok == WJB_VALUE)
		{
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("every value of headers must be a string")));
			for (int i = 0; i < v.val.string.len; i++)
				if (v.val.string.val[i] == '\r' || v.val.string.val[i] == '\n')
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("a header value must not contain a line break")));
			bytes += v.val.string.len;
		}
	}
	if (n > HTTP_MAX_HEADERS || bytes > HTTP_MAX_HEADER_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("headers are too large"),
				 errdetail("A route sends at most %d headers of %d bytes in all.",
						   HTTP_MAX_HEADERS, HTTP_MAX_HEADER_BYTES)));
}

/* A header name: an HTTP token (RFC 9110) that the outbox does not set. */
static void
obx_check_header_name(const char *name, int len)
{
	char	   *lower;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a header name must not be empty")));
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if (!(isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL) || c >= 0x80)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid header name \"%s\"", pnstrdup(name, len)),
					 errdetail("A header name is a token of letters, digits and !#$%%&'*+-.^_`|~.")));
	}
	lower = pnstrdup(name, len);
	for (char *p = lower; *p; p++)
		*p = pg_ascii_tolower((unsigned char) *p);
	for (int i = 0; obx_reserved_headers[i] != NULL; i++)
		if (strcmp(lower, obx_reserved_headers[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" is set by the outbox", pnstrdup(name, len)),
					 errdetail("The outbox sets Content-Type, the webhook-* headers and the framing of the request itself.")));
}

/*
 * A CA file names a file of the server: only a superuser or a member of
 * pg_read_server_files may name one, as for COPY FROM a file.  It must be
 * an absolute path to a readable file.
 */
static char *
obx_check_ca_file(text *ca_file, Oid caller)
{
	char	   *path = text_to_cstring(ca_file);
	struct stat st;

	if (!superuser_arg(caller) &&
		!has_privs_of_role(caller, ROLE_PG_READ_SERVER_FILES))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to use CA file"),
				 errdetail("Only roles with privileges of the \"%s\" role may name a file of the server.",
						   "pg_read_server_files")));
	if (!is_absolute_path(path))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ca_file must be an absolute path")));
	if (stat(path, &st) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not use CA file \"%s\": %m", path)));
	if (!S_ISREG(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("CA file \"%s\" is not a regular file", path)));
	return path;
}
