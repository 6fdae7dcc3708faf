/*-------------------------------------------------------------------------
 *
 * outbox_error.c
 *		One error type with two ways out: raise it, or keep it as text.
 *
 * A condition such as "password is required" or "timestamp out of range for
 * an envelope" can be met where the outbox raises an error (creating a
 * route, building an envelope for a caller) and where it must not (one
 * delivery, whose failure is recorded with outbox.fail while the other
 * messages go on).  Each condition is therefore built once, by one function
 * of the module that knows it, into an OutboxError; the caller then raises
 * it with OutboxErrorRaise or formats it for last_error with
 * OutboxErrorText.  This is the shape of postgres_fdw's
 * pgfdw_report_error(elevel, ...) and dblink's dblink_res_error(..., fail,
 * ...).
 *
 * Messages are translated when they are set, as errmsg() would translate
 * them, so a raised condition reads the same as before and no message is
 * assembled from fragments a translator cannot see.
 *
 * Glossary:
 *	condition	SQLSTATE, primary message, and optional detail, hint and
 *				context
 *	error text	a condition as last_error keeps it:
 *				"<SQLSTATE>: <message>[\nDETAIL: ...][\nHINT: ...]
 *				[\nCONTEXT: ...]"
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"

#include "outbox_error.h"

/*
 * Set field to fmt, translated, formatted with the variadic arguments of
 * the enclosing function (the way elog.c's EVALUATE_MESSAGE does).
 */
#define OBX_FORMAT_FIELD(field, fmt) \
	do { \
		StringInfoData buf; \
		\
		initStringInfo(&buf); \
		for (;;) \
		{ \
			va_list		args; \
			int			needed; \
			\
			va_start(args, fmt); \
			needed = appendStringInfoVA(&buf, _(fmt), args); \
			va_end(args); \
			if (needed == 0) \
				break; \
			enlargeStringInfo(&buf, needed); \
		} \
		(field) = buf.data; \
	} while (0)

static void obx_make_text_valid(char *str);

/* Forget any condition set in err. */
void
OutboxErrorClear(OutboxError *err)
{
	memset(err, 0, sizeof(OutboxError));
}

/*
 * Set the condition: its SQLSTATE and primary message.  Clears the detail,
 * hint and context of any condition set before.
 */
void
OutboxErrorSet(OutboxError *err, int sqlerrcode, const char *fmt,...)
{
	OutboxErrorClear(err);
	err->sqlerrcode = sqlerrcode;
	OBX_FORMAT_FIELD(err->message, fmt);
}

/* Add the detail: a full sentence. */
void
OutboxErrorDetail(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_FIELD(err->detail, fmt);
}

/* Add the hint: a full sentence. */
void
OutboxErrorHint(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_FIELD(err->hint, fmt);
}

/* Add the context: where the condition was met. */
void
OutboxErrorContext(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_FIELD(err->context, fmt);
}

/*
 * Report the condition at elevel; from ERROR up this does not return.  The
 * texts are already translated, so they go out as they are.
 */
void
OutboxErrorRaise(int elevel, const OutboxError *err)
{
	Assert(OutboxErrorIsSet(err));

	ereport(elevel,
			(errcode(err->sqlerrcode),
			 errmsg_internal("%s", err->message),
			 err->detail != NULL ? errdetail_internal("%s", err->detail) : 0,
			 err->hint != NULL ? errhint("%s", err->hint) : 0,
			 err->context != NULL ? errcontext("%s", err->context) : 0));
}

/*
 * Format the condition as delivery records it in last_error (see the
 * glossary); palloc'd, valid in the database encoding.
 */
char *
OutboxErrorText(const OutboxError *err)
{
	StringInfoData buf;

	Assert(OutboxErrorIsSet(err));

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s: %s", unpack_sql_state(err->sqlerrcode),
					 err->message);
	if (err->detail != NULL)
		appendStringInfo(&buf, "\nDETAIL: %s", err->detail);
	if (err->hint != NULL)
		appendStringInfo(&buf, "\nHINT: %s", err->hint);
	if (err->context != NULL)
		appendStringInfo(&buf, "\nCONTEXT: %s", err->context);

	obx_make_text_valid(buf.data);
	return buf.data;
}

/*
 * A message that a remote server sent before the session's client_encoding
 * was in force (such as an authentication failure) comes in that server's
 * encoding.  Keep the text valid in ours by replacing non-ASCII bytes if it
 * is not.
 */
static void
obx_make_text_valid(char *str)
{
	char	   *p;

	if (pg_verifymbstr(str, strlen(str), true))
		return;
	for (p = str; *p; p++)
	{
		if (IS_HIGHBIT_SET(*p))
			*p = '?';
	}
}
