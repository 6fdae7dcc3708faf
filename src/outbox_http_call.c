/*-------------------------------------------------------------------------
 *
 * outbox_http_call.c
 *		Delivery of one message to an HTTP route, as an HttpCall: a POST
 *		that never blocks, driven by the caller's wait on its socket, and
 *		how it ended; and the check of a route's URL.
 *
 * A call runs on libcurl's multi interface, which leaves the waiting to
 * us: libcurl says through its callbacks (outbox_http_conn.c) which
 * sockets it wants to read or write and when its next timer runs out;
 * HttpCallSocket and HttpCallDeadline hand that to the caller's wait, and
 * each HttpCallStep gives libcurl what the sockets have.  The worker waits
 * for many calls at once (outbox_drain_wait.c); a backend waits for its
 * one call with HttpCallWait, serving interrupts.  When libcurl has
 * several sockets open (it tries an IPv6 and an IPv4 address at once), one
 * is waited on and the call asks to be stepped again within OBX_POLL_MS,
 * when each of them is looked at.  The call ends by its deadline at the
 * latest.
 *
 * Delivery never raises an error for a network or endpoint problem: the
 * call ends with an outcome (outbox_http.h), its condition kept as an
 * OutboxError, and a report of the status, latency and Retry-After.  A
 * response whose headers are all in decides by its status alone, even if
 * its body is cut short (too long, or the deadline came while it was
 * read); without a status the endpoint was unreachable.  The conditions:
 *	- a status that is not 2xx: 38000 (external_routine_exception),
 *	  "HTTP <status> from <url>: <start of the body>"; for 410, "endpoint
 *	  answered 410 Gone"
 *	- a refused address, a name that does not resolve, a connection or TLS
 *	  failure: 08006 (connection_failure)
 *	- the deadline: 57014 (query_canceled), as a remote command's timeout
 *	- no file descriptor left: 53000 (insufficient_resources)
 *
 * The body sent is not copied: the caller keeps it until the call ends.
 * The call lives in the caller's memory context, which may be reset once
 * the call has ended: libcurl calls back only into the call's connection
 * entry, which outbox_http_conn.c owns.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "outbox.h"
#include "outbox_http_int.h"

#define OBX_URL_MAX_BYTES	2048
#define OBX_POLL_MS			10	/* see the header comment */

/* one message's delivery: see the header comment */
struct HttpCall
{
	MemoryContext cxt;			/* of the call and its condition */
	char	   *url;
	TimestampTz start;
	TimestampTz deadline;
	HttpConn   *conn;			/* held until the call ends */
	bool		ended;
	HttpOutcome outcome;
	OutboxError error;
	HttpCallReport report;
};

static bool obx_latch_consumed = false;

static void obx_finish(HttpCall *call, CURLcode result);
static void obx_answered(HttpCall *call, long status);
static void obx_unreachable(HttpCall *call, CURLcode result);
static void obx_timed_out(HttpCall *call);
static void obx_end(HttpCall *call, HttpOutcome outcome, bool keep);
static char *obx_body_text(HttpConn *conn);

/* ---------------------------------------------------------------------
 * The calls
 * ---------------------------------------------------------------------
 */

/* See outbox_http.h.  The call is allocated in the current memory context. */
HttpCall *
HttpCallStart(const char *url, const char *ca_file, List *headers,
			  const char *body, size_t len, TimestampTz deadline)
{
	HttpCall   *call = palloc0(sizeof(HttpCall));

	call->cxt = CurrentMemoryContext;
	call->url = pstrdup(url);
	call->start = GetCurrentTimestamp();
	call->deadline = deadline;
	call->outcome = HTTP_PENDING;
	OutboxErrorClear(&call->error);

	HttpLibraryInit();
	if (call->start >= deadline)
	{
		obx_timed_out(call);
		obx_end(call, HTTP_UNREACHABLE, false);
		return call;
	}

	call->conn = HttpConnTake(url, ca_file);
	PG_TRY();
	{
		HttpConnStart(call->conn, call->url, ca_file, headers, body, len,
					  TimestampDifferenceMilliseconds(call->start, deadline));
		HttpCallStep(call, 0);
	}
	PG_CATCH();
	{
		HttpCallAbandon(call);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return call;
}

/*
 * The socket events the call waits for, and the socket in *sock.  0 when
 * it has ended, or while it has no socket to wait on (then its deadline is
 * at most OBX_POLL_MS away): HttpCallOutcome says which.
 */
int
HttpCallSocket(HttpCall *call, pgsocket *sock)
{
	HttpConn   *conn = call->conn;
	int			i;

	*sock = PGINVALID_SOCKET;
	if (call->ended || conn == NULL)
		return 0;
	for (i = 0; i < conn->nsockets; i++)
	{
		if (conn->sockets[i].events != 0)
		{
			*sock = conn->sockets[i].fd;
			return conn->sockets[i].events;
		}
	}
	return 0;
}

/*
 * When the call's wait runs out: its deadline, libcurl's next timer, or
 * soon when the socket HttpCallSocket gave is not all there is to watch.
 */
TimestampTz
HttpCallDeadline(HttpCall *call)
{
	HttpConn   *conn = call->conn;
	TimestampTz until = call->deadline;
	pgsocket	sock;

	if (call->ended || conn == NULL)
		return until;
	if (conn->timer_set)
		until = Min(until, conn->timer);
	if (conn->nsockets != 1 || HttpCallSocket(call, &sock) == 0)
		until = Min(until, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   OBX_POLL_MS));
	return until;
}

/*
 * Take the call as far as it goes without waiting.  ready is what the wait
 * saw on the socket HttpCallSocket gave (none after a timeout); each of
 * libcurl's sockets is looked at anyway, without waiting, so that those
 * not waited on are served too.  Needs no transaction.
 */
void
HttpCallStep(HttpCall *call, int ready)
{
	HttpConn   *conn = call->conn;
	CURLMcode	mrc;
	CURLMsg    *msg;

	if (call->ended || conn == NULL)
		return;

	mrc = HttpConnDrive(conn, ready == 0);
	if (mrc != CURLM_OK)
	{
		strlcpy(conn->errbuf, curl_multi_strerror(mrc), sizeof(conn->errbuf));
		obx_finish(call, CURLE_SEND_ERROR);
		return;
	}
	msg = HttpConnDone(conn);
	if (msg != NULL)
		obx_finish(call, msg->data.result);
	else if (GetCurrentTimestamp() >= call->deadline)
	{
		obx_timed_out(call);
		obx_end(call, HTTP_UNREACHABLE, false);
	}
}

/*
 * Wait for the call to end, on the latch and the call's socket, serving
 * interrupts: the backend's way, one call at a time.  An error (an
 * interrupt) abandons the call, closing its connection, and goes on.
 */
void
HttpCallWait(HttpCall *call)
{
	obx_latch_consumed = false;
	PG_TRY();
	{
		while (!call->ended)
		{
			pgsocket	sock;
			int			events = HttpCallSocket(call, &sock);
			long		timeout;
			int			rc = 0;

			timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													  HttpCallDeadline(call));
			if (timeout > 0)
				rc = WaitLatchOrSocket(MyLatch,
									   WL_LATCH_SET | WL_TIMEOUT |
									   WL_EXIT_ON_PM_DEATH | events,
									   sock, timeout, PG_WAIT_EXTENSION);
			if (rc & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				obx_latch_consumed = true;
				CHECK_FOR_INTERRUPTS();
			}
			HttpCallStep(call, rc & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE));
		}
	}
	PG_CATCH();
	{
		HttpCallAbandon(call);
		PG_RE_THROW();
	}
	PG_END_TRY();

	/* whatever set the latch meanwhile must still find it set */
	if (obx_latch_consumed)
		SetLatch(MyLatch);
	obx_latch_consumed = false;
}

/*
 * How the call ended (HTTP_PENDING while it runs, or when it was
 * abandoned); *error points to its condition when it did not deliver, and
 * *report receives what it reports.
 */
HttpOutcome
HttpCallOutcome(HttpCall *call, const OutboxError **error,
				HttpCallReport *report)
{
	*error = &call->error;
	*report = call->report;
	return call->outcome;
}

/*
 * Give up a call after an error: its transfer and connection are dropped
 * at once, never waited for.  Safe on a call that has ended.
 */
void
HttpCallAbandon(HttpCall *call)
{
	HttpConn   *conn = call->conn;

	call->conn = NULL;
	call->ended = true;
	if (conn != NULL)
		HttpConnClose(conn);
}

/* ---------------------------------------------------------------------
 * The steps of a call
 * ---------------------------------------------------------------------
 */

/*
 * libcurl has ended the transfer with result.  A response whose headers
 * are all in decides by its status, even if reading its body failed
 * afterwards (it was too long, or the deadline came); without one the
 * endpoint was unreachable.
 */
static void
obx_finish(HttpCall *call, CURLcode result)
{
	HttpConn   *conn = call->conn;
	long		status = 0;
	curl_off_t	total_us = 0;
	MemoryContext oldcxt = MemoryContextSwitchTo(call->cxt);

	(void) curl_easy_getinfo(conn->easy, CURLINFO_RESPONSE_CODE, &status);
	if (!conn->headers_done || status < 200)
		status = 0;
	call->report.status = (int) status;
	if (status != 0 &&
		curl_easy_getinfo(conn->easy, CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK &&
		total_us > 0)
		call->report.latency_ms = total_us / 1000.0;

	if (status != 0)
		obx_answered(call, status);
	else
		obx_unreachable(call, result);

	MemoryContextSwitchTo(oldcxt);
	obx_end(call, call->outcome, result == CURLE_OK);
}

/* The outcome and condition of a response with status. */
static void
obx_answered(HttpCall *call, long status)
{
	HttpConn   *conn = call->conn;
	TimestampTz now = GetCurrentTimestamp();
	char	   *body;

	if (conn->retry_seconds >= 0)
		call->report.retry_after =
			TimestampTzPlusMilliseconds(now, Min(conn->retry_seconds,
												 HTTP_RETRY_AFTER_MAX) * 1000);
	else if (conn->retry_date >= 0)
		call->report.retry_after =
			Max(time_t_to_timestamptz(conn->retry_date), now);

	if (status >= 200 && status < 300)
	{
		call->outcome = HTTP_DELIVERED;
		return;
	}
	if (status == 410)
	{
		call->outcome = HTTP_GONE;
		OutboxErrorSet(&call->error, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
					   "endpoint answered 410 Gone");
		OutboxErrorContext(&call->error, "HTTP request to %s", call->url);
		return;
	}

	if (status >= 400 && status < 500 && status != 408 && status != 429)
		call->outcome = HTTP_REJECTED;
	else
		call->outcome = HTTP_RETRY;		/* 3xx, 408, 429, 5xx and others */

	body = obx_body_text(conn);
	if (body[0] != '\0')
		OutboxErrorSet(&call->error, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
					   "HTTP %ld from %s: %s", status, call->url, body);
	else
		OutboxErrorSet(&call->error, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
					   "HTTP %ld from %s", status, call->url);
	if (status >= 300 && status < 400)
		OutboxErrorDetail(&call->error, "HTTP routes do not follow redirects.");
}

/* The condition of a call that got no response. */
static void
obx_unreachable(HttpCall *call, CURLcode result)
{
	HttpConn   *conn = call->conn;
	OutboxError *error = &call->error;

	call->outcome = HTTP_UNREACHABLE;
	if (result == CURLE_OPERATION_TIMEDOUT)
	{
		obx_timed_out(call);
		return;
	}
	if (conn->refused && result == CURLE_COULDNT_CONNECT)
	{
		OutboxErrorSet(error, ERRCODE_CONNECTION_FAILURE,
					   "connection to %s refused: it is a private address",
					   conn->refused_addr);
		OutboxErrorDetail(error, "%s", conn->refused_why);
		OutboxErrorHint(error, "To let HTTP routes reach it, add its network to %s, or turn %s on.",
						"outbox.http_private_networks",
						"outbox.http_allow_private");
	}
	else if (conn->no_fd && result == CURLE_COULDNT_CONNECT)
	{
		OutboxErrorSet(error, ERRCODE_INSUFFICIENT_RESOURCES,
					   "could not send HTTP request to %s: there are too many open files on the local server",
					   call->url);
		OutboxErrorHint(error, "Raise the server's max_files_per_process and/or \"ulimit -n\" limits.");
		return;
	}
	else
	{
		OutboxErrorSet(error, ERRCODE_CONNECTION_FAILURE,
					   "could not send HTTP request to %s: %s", call->url,
					   conn->errbuf[0] != '\0' ? conn->errbuf : curl_easy_strerror(result));
		if (result == CURLE_PEER_FAILED_VERIFICATION)
			OutboxErrorHint(error, "If a private certificate authority signed the endpoint's certificate, name its PEM bundle as the route's CA file.");
		else if (result == CURLE_OK)
			OutboxErrorDetail(error, "The response had no HTTP status.");
		return;
	}
	OutboxErrorContext(error, "HTTP request to %s", call->url);
}

/*
 * The condition of a call whose deadline has passed (an unreachable
 * outcome), as a remote command's timeout is.
 */
static void
obx_timed_out(HttpCall *call)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(call->cxt);

	OutboxErrorSet(&call->error, ERRCODE_QUERY_CANCELED,
				   "HTTP request to %s timed out after %ld ms", call->url,
				   (long) ((GetCurrentTimestamp() - call->start) / 1000));
	MemoryContextSwitchTo(oldcxt);
}

/*
 * The call has its outcome: its handle goes back to the cache when its
 * connection may carry the next call (keep), and is closed otherwise.
 */
static void
obx_end(HttpCall *call, HttpOutcome outcome, bool keep)
{
	HttpConn   *conn = call->conn;

	if (call->report.latency_ms == 0)
		call->report.latency_ms = (GetCurrentTimestamp() - call->start) / 1000.0;
	call->outcome = outcome;
	call->ended = true;
	call->conn = NULL;
	if (conn != NULL)
		HttpConnRelease(conn, keep);
}

/*
 * The start of the response's body as text valid in the database
 * encoding: a NUL or an invalid byte becomes '?', a character cut at the
 * end is dropped.  palloc'd.
 */
static char *
obx_body_text(HttpConn *conn)
{
	int			encoding = GetDatabaseEncoding();
	const char *p = conn->body;
	int			left = (int) conn->body_kept;
	char	   *text = palloc(left + 1);
	char	   *out = text;

	while (left > 0)
	{
		int			n = *p == '\0' ? -1 :
			pg_encoding_verifymbchar(encoding, p, left);

		if (n < 0)
		{
			if (*p != '\0' && left < pg_encoding_mblen(encoding, p))
				break;			/* cut by the end of what was kept */
			*out++ = '?';
			n = 1;
		}
		else
		{
			memcpy(out, p, n);
			out += n;
		}
		p += n;
		left -= n;
	}
	*out = '\0';
	return text;
}

/* ---------------------------------------------------------------------
 * The check of a route's URL
 * ---------------------------------------------------------------------
 */

/* A part of a parsed URL, palloc'd, or NULL when it has none. */
static char *
obx_url_part(CURLU *u, CURLUPart part)
{
	char	   *value = NULL;
	char	   *copy = NULL;

	if (curl_url_get(u, part, &value, 0) == CURLUE_OK && value != NULL)
		copy = pstrdup(value);
	curl_free(value);
	return copy;
}

/*
 * Raise an error unless url may be an HTTP route's: an http or https URL
 * with a host, no user name or password, no fragment, at most
 * OBX_URL_MAX_BYTES.
 */
void
HttpCheckUrl(const char *url)
{
	CURLU	   *u;
	CURLUcode	rc;
	char	   *scheme;
	char	   *host;
	bool		credentials;
	bool		fragment;
	const char *authority;

	if (strlen(url) > OBX_URL_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL for an HTTP route"),
				 errdetail("The URL is longer than %d bytes.", OBX_URL_MAX_BYTES)));

	HttpLibraryInit();
	u = curl_url();
	if (u == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	rc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
	if (rc != CURLUE_OK)
	{
		curl_url_cleanup(u);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL for an HTTP route"),
				 errdetail("libcurl could not parse it: %s.",
						   curl_url_strerror(rc))));
	}
	scheme = obx_url_part(u, CURLUPART_SCHEME);
	host = obx_url_part(u, CURLUPART_HOST);
	credentials = obx_url_part(u, CURLUPART_USER) != NULL ||
		obx_url_part(u, CURLUPART_PASSWORD) != NULL;
	fragment = obx_url_part(u, CURLUPART_FRAGMENT) != NULL ||
		strchr(url, '#') != NULL;
	curl_url_cleanup(u);

	if (scheme == NULL ||
		(pg_strcasecmp(scheme, "http") != 0 && pg_strcasecmp(scheme, "https") != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("HTTP routes take http and https URLs only"),
				 errdetail("The URL's scheme is \"%s\".",
						   scheme != NULL ? scheme : "")));
	/* libcurl reads "http:///name" as "http://name/": not here */
	authority = strstr(url, "://");
	if (host == NULL || host[0] == '\0' ||
		authority == NULL || authority[3] == '/' || authority[3] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL for an HTTP route"),
				 errdetail("The URL has no host.")));
	if (credentials)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL for an HTTP route"),
				 errdetail("The URL carries a user name or password."),
				 errhint("Put credentials in the route's headers, such as an Authorization header.")));
	if (fragment)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid URL for an HTTP route"),
				 errdetail("The URL has a fragment (a part after \"#\").")));
}
