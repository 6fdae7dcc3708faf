/*-------------------------------------------------------------------------
 *
 * outbox_http_conn.c
 *		The connections of HTTP routes: libcurl and its handles, cached
 *		per origin so that consecutive calls to one endpoint reuse their
 *		connection; a transfer's options; libcurl's callbacks, which tell
 *		the call what to wait for and judge each address before it is
 *		connected to.
 *
 * An HttpConn (outbox_http_int.h) is a libcurl multi handle with one easy
 * handle; the multi handle keeps the connection (one at most) between
 * transfers.  A call takes an entry of its origin (scheme, host and port)
 * and CA file that no other call holds, or a new one, and gives it back
 * when it ends: kept when the transfer went through, closed after any
 * failure, so that a connection in an unknown state never carries the next
 * call.  At most HTTP_IDLE_CONNS idle entries are kept, the most recently
 * used.  The entries live in this file's memory context, for the life of
 * the process.  Every socket libcurl opens to an endpoint holds a place in
 * fd.c's budget of external descriptors, as a remote route's connection
 * does; a multi handle also keeps a pair of sockets of its own (libcurl's
 * wake-up pair), which the budget does not see, hence the small number of
 * idle entries.
 *
 * libcurl is initialized once per process, by the first call or URL check:
 * never in the postmaster, which makes neither.
 *
 * Each transfer is a POST that follows no redirect and speaks only http
 * and https, verifies the endpoint's certificate and name (against the
 * route's CA file when it names one), uses no proxy from the environment,
 * and never waits for a name lookup it gives up (CURLOPT_QUICK_EXIT: the
 * lookup's thread is left to end on its own).  Its body is not copied:
 * the call's caller keeps it until the call ends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "outbox.h"
#include "outbox_http_int.h"

#define HTTP_USER_AGENT		"krizaka_outbox/1.5"
#define HTTP_BODY_READ_MAX	(64 * 1024) /* bytes of a response read at most */
#define HTTP_IDLE_CONNS		8	/* idle entries kept */

static MemoryContext HttpConnContext = NULL;
static dlist_head obx_conns = DLIST_STATIC_INIT(obx_conns);
static int	obx_fds = 0;		/* sockets of ours in fd.c's budget */

static char *obx_conn_key(const char *url, const char *ca_file);
static void obx_append_header(HttpConn *conn, const char *line);
static int	obx_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp,
						  void *socketp);
static int	obx_timer_cb(CURLM *multi, long timeout_ms, void *userp);
static curl_socket_t obx_open_socket(void *userp, curlsocktype purpose,
									 struct curl_sockaddr *address);
static int	obx_close_socket(void *userp, curl_socket_t s);
static size_t obx_read_header(char *data, size_t size, size_t nitems,
							  void *userp);
static size_t obx_read_body(char *data, size_t size, size_t nmemb, void *userp);

/* Set an option of the easy handle; libcurl's refusal is an error. */
#define OBX_SETOPT(easy, option, value) \
	do { \
		CURLcode	setopt_rc = curl_easy_setopt((easy), (option), (value)); \
		\
		if (setopt_rc != CURLE_OK) \
			ereport(ERROR, \
					(errcode(ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION), \
					 errmsg("could not set up an HTTP request: %s", \
							curl_easy_strerror(setopt_rc)), \
					 errdetail_internal("libcurl refused %s.", #option))); \
	} while (0)

/* ---------------------------------------------------------------------
 * The cache
 * ---------------------------------------------------------------------
 */

/*
 * Initialize libcurl, once per process, on first use.  Called before any
 * other use of libcurl.
 */
void
HttpLibraryInit(void)
{
	static bool initialized = false;
	CURLcode	rc;

	if (initialized)
		return;
	rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION),
				 errmsg("could not initialize libcurl: %s",
						curl_easy_strerror(rc))));
	HttpConnContext = AllocSetContextCreate(TopMemoryContext,
											"krizaka_outbox HTTP connections",
											ALLOCSET_SMALL_SIZES);
	initialized = true;
}

/*
 * The key of the entries that may carry a call to url: its origin and the
 * CA file (the whole URL if it does not parse: the call then fails).
 */
static char *
obx_conn_key(const char *url, const char *ca_file)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *port = NULL;
	char	   *key;

	if (u == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
		key = psprintf("%s://%s:%s\n%s", scheme, host, port,
					   ca_file != NULL ? ca_file : "");
	else
		key = psprintf("%s\n%s", url, ca_file != NULL ? ca_file : "");
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return key;
}

/*
 * Take an entry for a call to url that no other call holds: the most
 * recently used of its origin and CA file, or a new one.  Give it back
 * with HttpConnRelease, or close it with HttpConnClose.
 */
HttpConn *
HttpConnTake(const char *url, const char *ca_file)
{
	char	   *key = obx_conn_key(url, ca_file);
	dlist_mutable_iter iter;
	HttpConn   *conn;

	dlist_foreach_modify(iter, &obx_conns)
	{
		conn = dlist_container(HttpConn, node, iter.cur);
		if (conn->in_use)
			continue;
		/* opened under rules of the address filter that have changed */
		if (conn->generation != HttpFilterGeneration())
		{
			HttpConnClose(conn);
			continue;
		}
		if (strcmp(conn->key, key) == 0)
		{
			conn->in_use = true;
			pfree(key);
			return conn;
		}
	}

	conn = MemoryContextAllocZero(HttpConnContext, sizeof(HttpConn));
	conn->key = MemoryContextStrdup(HttpConnContext, key);
	pfree(key);
	conn->multi = curl_multi_init();
	conn->easy = curl_easy_init();
	if (conn->multi == NULL || conn->easy == NULL ||
		curl_multi_setopt(conn->multi, CURLMOPT_SOCKETFUNCTION, obx_socket_cb) != CURLM_OK ||
		curl_multi_setopt(conn->multi, CURLMOPT_SOCKETDATA, conn) != CURLM_OK ||
		curl_multi_setopt(conn->multi, CURLMOPT_TIMERFUNCTION, obx_timer_cb) != CURLM_OK ||
		curl_multi_setopt(conn->multi, CURLMOPT_TIMERDATA, conn) != CURLM_OK ||
		curl_multi_setopt(conn->multi, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK)
	{
		if (conn->easy != NULL)
			curl_easy_cleanup(conn->easy);
		if (conn->multi != NULL)
			curl_multi_cleanup(conn->multi);
		pfree(conn->key);
		pfree(conn);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("libcurl could not make a handle.")));
	}
	conn->in_use = true;
	conn->generation = HttpFilterGeneration();
	dlist_push_head(&obx_conns, &conn->node);
	return conn;
}

/*
 * Give back an entry whose transfer has ended, with its connection for the
 * next call to its origin (keep), or closed.  Of the idle entries, the
 * HTTP_IDLE_CONNS most recently used are kept.
 */
void
HttpConnRelease(HttpConn *conn, bool keep)
{
	dlist_mutable_iter iter;
	int			idle = 0;

	if (!keep)
	{
		HttpConnClose(conn);
		return;
	}
	if (conn->added)
		curl_multi_remove_handle(conn->multi, conn->easy);
	conn->added = false;
	curl_slist_free_all(conn->headers);
	conn->headers = NULL;
	conn->nsockets = 0;
	conn->timer_set = false;
	conn->in_use = false;
	dlist_move_head(&obx_conns, &conn->node);

	dlist_foreach_modify(iter, &obx_conns)
	{
		HttpConn   *other = dlist_container(HttpConn, node, iter.cur);

		if (!other->in_use && ++idle > HTTP_IDLE_CONNS)
			HttpConnClose(other);
	}
}

/*
 * Close an entry, its transfer and its connection, without waiting for
 * anything, and forget it.  libcurl closes the sockets through
 * obx_close_socket, which still finds the entry.
 */
void
HttpConnClose(HttpConn *conn)
{
	if (conn->added)
		curl_multi_remove_handle(conn->multi, conn->easy);
	curl_easy_cleanup(conn->easy);
	curl_multi_cleanup(conn->multi);
	curl_slist_free_all(conn->headers);
	dlist_delete(&conn->node);
	pfree(conn->key);
	pfree(conn);
}

/* ---------------------------------------------------------------------
 * A transfer
 * ---------------------------------------------------------------------
 */

/*
 * Set up the entry's transfer, a POST of body to url with the header lines
 * ("Name: value") of headers, and hand it to libcurl, which starts it at
 * the first HttpConnDrive.  Raises an error only when libcurl cannot be
 * used at all.
 */
void
HttpConnStart(HttpConn *conn, const char *url, const char *ca_file,
			  List *headers, const char *body, size_t len, long timeout_ms)
{
	CURL	   *easy = conn->easy;
	ListCell   *lc;
	CURLMcode	mrc;

	/* what the last call left */
	curl_easy_reset(easy);
	curl_slist_free_all(conn->headers);
	conn->headers = NULL;
	conn->nsockets = 0;
	conn->timer_set = false;
	conn->headers_done = false;
	conn->retry_seconds = -1;
	conn->retry_date = -1;
	conn->body_kept = 0;
	conn->body_read = 0;
	conn->refused = false;
	conn->no_fd = false;
	conn->errbuf[0] = '\0';

	foreach(lc, headers)
		obx_append_header(conn, lfirst(lc));
	/* no "Expect: 100-continue" and its wait: the body goes at once */
	obx_append_header(conn, "Expect:");

	OBX_SETOPT(easy, CURLOPT_URL, url);
	OBX_SETOPT(easy, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075700
	/* a name lookup still running is left to its thread, never waited for */
	OBX_SETOPT(easy, CURLOPT_QUICK_EXIT, 1L);
#endif
	OBX_SETOPT(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
	OBX_SETOPT(easy, CURLOPT_POSTFIELDS, body != NULL ? body : "");
	OBX_SETOPT(easy, CURLOPT_HTTPHEADER, conn->headers);
	OBX_SETOPT(easy, CURLOPT_USERAGENT, HTTP_USER_AGENT);
	OBX_SETOPT(easy, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	OBX_SETOPT(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	OBX_SETOPT(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
	OBX_SETOPT(easy, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
	OBX_SETOPT(easy, CURLOPT_REDIR_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	OBX_SETOPT(easy, CURLOPT_PROXY, "");	/* none from the environment */
	OBX_SETOPT(easy, CURLOPT_SSL_VERIFYPEER, 1L);
	OBX_SETOPT(easy, CURLOPT_SSL_VERIFYHOST, 2L);
	if (ca_file != NULL)
		OBX_SETOPT(easy, CURLOPT_CAINFO, ca_file);
	OBX_SETOPT(easy, CURLOPT_TIMEOUT_MS, Max(timeout_ms, 1L));
	OBX_SETOPT(easy, CURLOPT_ERRORBUFFER, conn->errbuf);
	OBX_SETOPT(easy, CURLOPT_OPENSOCKETFUNCTION, obx_open_socket);
	OBX_SETOPT(easy, CURLOPT_OPENSOCKETDATA, conn);
	OBX_SETOPT(easy, CURLOPT_CLOSESOCKETFUNCTION, obx_close_socket);
	OBX_SETOPT(easy, CURLOPT_CLOSESOCKETDATA, conn);
	OBX_SETOPT(easy, CURLOPT_HEADERFUNCTION, obx_read_header);
	OBX_SETOPT(easy, CURLOPT_HEADERDATA, conn);
	OBX_SETOPT(easy, CURLOPT_WRITEFUNCTION, obx_read_body);
	OBX_SETOPT(easy, CURLOPT_WRITEDATA, conn);

	mrc = curl_multi_add_handle(conn->multi, easy);
	if (mrc != CURLM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION),
				 errmsg("could not start an HTTP request: %s",
						curl_multi_strerror(mrc))));
	conn->added = true;
}

/* Add a line to the request's headers. */
static void
obx_append_header(HttpConn *conn, const char *line)
{
	struct curl_slist *list = curl_slist_append(conn->headers, line);

	if (list == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	conn->headers = list;
}

/*
 * Take the transfer as far as it goes without waiting: each socket is
 * looked at (poll without waiting) and what is ready handed to libcurl,
 * then libcurl's timer is served when it has run out, or when the caller's
 * wait did (timed_out).
 */
CURLMcode
HttpConnDrive(HttpConn *conn, bool timed_out)
{
	struct pollfd fds[HTTP_SOCKETS_MAX];
	int			nfds = conn->nsockets;
	int			running;
	int			i;
	CURLMcode	mrc = CURLM_OK;

	for (i = 0; i < nfds; i++)
	{
		int			events = conn->sockets[i].events;

		fds[i].fd = conn->sockets[i].fd;
		fds[i].events = ((events & WL_SOCKET_READABLE) ? POLLIN : 0) |
			((events & WL_SOCKET_WRITEABLE) ? POLLOUT : 0);
		fds[i].revents = 0;
	}
	if (nfds > 0 && poll(fds, nfds, 0) > 0)
	{
		for (i = 0; i < nfds && mrc == CURLM_OK; i++)
		{
			int			mask = 0;

			if (fds[i].revents & (POLLIN | POLLHUP))
				mask |= CURL_CSELECT_IN;
			if (fds[i].revents & POLLOUT)
				mask |= CURL_CSELECT_OUT;
			if (fds[i].revents & (POLLERR | POLLNVAL))
				mask |= CURL_CSELECT_ERR;
			if (mask != 0)
				mrc = curl_multi_socket_action(conn->multi, fds[i].fd, mask,
											   &running);
		}
	}
	if (mrc == CURLM_OK &&
		(timed_out ||
		 (conn->timer_set && GetCurrentTimestamp() >= conn->timer)))
		mrc = curl_multi_socket_action(conn->multi, CURL_SOCKET_TIMEOUT, 0,
									   &running);
	return mrc;
}

/* The message of the transfer's end, or NULL while it runs. */
CURLMsg *
HttpConnDone(HttpConn *conn)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(conn->multi, &left)) != NULL)
	{
		if (msg->msg == CURLMSG_DONE)
			return msg;
	}
	return NULL;
}

/* ---------------------------------------------------------------------
 * libcurl's callbacks: they run inside libcurl, so they neither allocate
 * nor raise errors, and they touch only their entry
 * ---------------------------------------------------------------------
 */

/* libcurl wants socket s watched for what (or no longer: CURL_POLL_REMOVE). */
static int
obx_socket_cb(CURL *easy, curl_socket_t s, int what, void *userp,
			  void *socketp)
{
	HttpConn   *conn = (HttpConn *) userp;
	int			i;

	for (i = 0; i < conn->nsockets; i++)
	{
		if (conn->sockets[i].fd == s)
			break;
	}
	if (what == CURL_POLL_REMOVE)
	{
		if (i < conn->nsockets)
			conn->sockets[i] = conn->sockets[--conn->nsockets];
		return 0;
	}
	if (i == conn->nsockets)
	{
		if (conn->nsockets == HTTP_SOCKETS_MAX)
			return -1;			/* cannot happen: libcurl aborts the call */
		conn->sockets[conn->nsockets++].fd = s;
	}
	conn->sockets[i].events = ((what & CURL_POLL_IN) ? WL_SOCKET_READABLE : 0) |
		((what & CURL_POLL_OUT) ? WL_SOCKET_WRITEABLE : 0);
	return 0;
}

/* libcurl wants a step in timeout_ms (-1: no longer). */
static int
obx_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	HttpConn   *conn = (HttpConn *) userp;

	conn->timer_set = timeout_ms >= 0;
	if (conn->timer_set)
		conn->timer = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

/*
 * libcurl is about to connect to address: the address filter has its say
 * first, and the socket takes a place in fd.c's budget of descriptors.
 */
static curl_socket_t
obx_open_socket(void *userp, curlsocktype purpose,
				struct curl_sockaddr *address)
{
	HttpConn   *conn = (HttpConn *) userp;
	curl_socket_t s;

	if (!HttpAddressAllowed(&address->addr, address->addrlen,
							conn->refused_why, sizeof(conn->refused_why)))
	{
		const void *bytes = address->family == AF_INET6 ?
			(const void *) &((struct sockaddr_in6 *) &address->addr)->sin6_addr :
			(const void *) &((struct sockaddr_in *) &address->addr)->sin_addr;

		if (inet_ntop(address->family, bytes, conn->refused_addr,
					  sizeof(conn->refused_addr)) == NULL)
			strlcpy(conn->refused_addr, "an address", sizeof(conn->refused_addr));
		conn->refused = true;
		return CURL_SOCKET_BAD;
	}
	if (!AcquireExternalFD())
	{
		conn->no_fd = true;
		return CURL_SOCKET_BAD;
	}
	s = socket(address->family, address->socktype, address->protocol);
	if (s == CURL_SOCKET_BAD)
		ReleaseExternalFD();
	else
		obx_fds++;
	return s;
}

/* libcurl closes a socket that obx_open_socket opened. */
static int
obx_close_socket(void *userp, curl_socket_t s)
{
	if (obx_fds > 0)
	{
		obx_fds--;
		ReleaseExternalFD();
	}
	return close(s);
}

/*
 * A line of the response's headers: a status line starts a response (an
 * interim 1xx one may come first), an empty line ends its headers, and
 * Retry-After is kept.
 */
static size_t
obx_read_header(char *data, size_t size, size_t nitems, void *userp)
{
	HttpConn   *conn = (HttpConn *) userp;
	size_t		len = size * nitems;
	char		value[64];
	size_t		n = 0;
	size_t		i;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
	{
		conn->headers_done = false;
		conn->retry_seconds = -1;
		conn->retry_date = -1;
	}
	else if (len <= 2 && (len == 0 || data[0] == '\r' || data[0] == '\n'))
		conn->headers_done = true;
	else if (len > 12 && pg_strncasecmp(data, "Retry-After:", 12) == 0)
	{
		/* the value, without blanks around it */
		for (i = 12; i < len && n < sizeof(value) - 1; i++)
		{
			if (data[i] == '\r' || data[i] == '\n')
				break;
			if (n > 0 || (data[i] != ' ' && data[i] != '\t'))
				value[n++] = data[i];
		}
		while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			n--;
		value[n] = '\0';

		if (n > 0 && strspn(value, "0123456789") == n)
			conn->retry_seconds = n > 9 ? HTTP_RETRY_AFTER_MAX : atol(value);
		else if (n > 0)
			conn->retry_date = curl_getdate(value, NULL);
	}
	return len;
}

/*
 * A part of the response's body: the first HTTP_ERROR_BODY_BYTES are kept,
 * and reading stops after HTTP_BODY_READ_MAX (libcurl then ends the
 * transfer with a write error, and the status decides).
 */
static size_t
obx_read_body(char *data, size_t size, size_t nmemb, void *userp)
{
	HttpConn   *conn = (HttpConn *) userp;
	size_t		len = size * nmemb;

	if (conn->body_kept < sizeof(conn->body))
	{
		size_t		take = Min(len, sizeof(conn->body) - conn->body_kept);

		memcpy(conn->body + conn->body_kept, data, take);
		conn->body_kept += take;
	}
	conn->body_read += len;
	if (conn->body_read > HTTP_BODY_READ_MAX)
		return 0;
	return len;
}

