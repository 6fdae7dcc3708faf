/*-------------------------------------------------------------------------
 *
 * outbox_http_int.h
 *		What the HTTP call (outbox_http_call.c) and its connections
 *		(outbox_http_conn.c) share.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_INT_H
#define OUTBOX_HTTP_INT_H

#include <netinet/in.h>
#include <curl/curl.h>

#include "datatype/timestamp.h"
#include "lib/ilist.h"

#include "outbox_http.h"

#define HTTP_SOCKETS_MAX	8	/* sockets of one call libcurl may open */
#define HTTP_RETRY_AFTER_MAX (366 * SECS_PER_DAY)	/* a longer one is cut */

/* a socket libcurl waits on, and for what (WL_SOCKET_*) */
typedef struct HttpSocket
{
	curl_socket_t fd;
	int			events;
} HttpSocket;

/*
 * A connection of the cache: a libcurl multi handle with its one easy
 * handle, and the connection to the endpoint they keep between calls.
 * Held by one call at a time.  libcurl's callbacks report here, never
 * into the call, whose memory may be gone when they run.
 */
typedef struct HttpConn
{
	dlist_node	node;			/* in the cache, the most recently used first */
	char	   *key;			/* origin, a newline, the CA file */
	CURLM	   *multi;
	CURL	   *easy;
	bool		in_use;			/* a call holds it */
	uint64		generation;		/* of the address filter it was opened under */
	bool		added;			/* easy is in multi: a transfer runs */
	struct curl_slist *headers; /* the request's, for libcurl */

	/* the running transfer, as libcurl's callbacks report it */
	HttpSocket	sockets[HTTP_SOCKETS_MAX];
	int			nsockets;
	bool		timer_set;
	TimestampTz timer;			/* when libcurl wants to be stepped */
	bool		headers_done;	/* a response's headers are all in */
	long		retry_seconds;	/* Retry-After: delta seconds; -1: none */
	time_t		retry_date;		/* Retry-After: an HTTP date; -1: none */
	char		body[HTTP_ERROR_BODY_BYTES];	/* the start of the body */
	size_t		body_kept;
	size_t		body_read;
	bool		refused;		/* an address was refused */
	bool		no_fd;			/* no file descriptor was left */
	char		refused_addr[INET6_ADDRSTRLEN];
	char		refused_why[256];
	char		errbuf[CURL_ERROR_SIZE];
} HttpConn;

extern void HttpLibraryInit(void);
extern HttpConn *HttpConnTake(const char *url, const char *ca_file);
extern void HttpConnStart(HttpConn *conn, const char *url, const char *ca_file,
						  List *headers, const char *body, size_t len,
						  long timeout_ms);
extern CURLMcode HttpConnDrive(HttpConn *conn, bool timed_out);
extern CURLMsg *HttpConnDone(HttpConn *conn);
extern void HttpConnRelease(HttpConn *conn, bool keep);
extern void HttpConnClose(HttpConn *conn);

#endif							/* OUTBOX_HTTP_INT_H */
