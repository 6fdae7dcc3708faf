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
 * Each part of a condition is formatted twice when it is set: untranslated
 * for the text, which is stored and must read the same whichever session
 * delivered, and translated for raising, as errmsg() would translate it.
 * Every message is written whole, never assembled from fragments a
 * translator cannot see.
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
 * Set part to fmt formatted with the variadic arguments of the enclosing
 * function, untranslated and translated (the way elog.c's EVALUATE_MESSAGE
 * formats, restarting the arguments for each attempt).
 */
#define OBX_FORMAT_PART(part, fmt) \
	do { \
		const char *translated_fmt = _(fmt); \
		\
		OBX_FORMAT_STRING((part).text, fmt, fmt); \
		if (translated_fmt == (fmt)) \
			(part).translated = (part).text; \
		else \
			OBX_FORMAT_STRING((part).translated, translated_fmt, fmt); \
	} while (0)

/* Set str to format formatted with the arguments that follow last_arg. */
#define OBX_FORMAT_STRING(str, format, last_arg) \
	do { \
		StringInfoData buf; \
		\
		initStringInfo(&buf); \
		for (;;) \
		{ \
			va_list		args; \
			int			needed; \
			\
			va_start(args, last_arg); \
			needed = appendStringInfoVA(&buf, (format), args); \
			va_end(args); \
			if (needed == 0) \
				break; \
			enlargeStringInfo(&buf, needed); \
		} \
		(str) = buf.data; \
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
	OBX_FORMAT_PART(err->message, fmt);
}

/* Add the detail: a full sentence. */
void
OutboxErrorDetail(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_PART(err->detail, fmt);
}

/* Add the hint: a full sentence. */
void
OutboxErrorHint(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_PART(err->hint, fmt);
}

/* Add the context: where the condition was met. */
void
OutboxErrorContext(OutboxError *err, const char *fmt,...)
{
	OBX_FORMAT_PART(err->context, fmt);
}

/*
 * Report the condition at elevel, translated; from ERROR up this does not
 * return.
 */
void
OutboxErrorRaise(int elevel, const OutboxError *err)
{
	Assert(OutboxErrorIsSet(err));

	ereport(elevel,
			(errcode(err->sqlerrcode),
			 errmsg_internal("%s", err->message.translated),
			 err->detail.text != NULL ?
			 errdetail_internal("%s", err->detail.translated) : 0,
			 err->hint.text != NULL ?
			 errhint("%s", err->hint.translated) : 0,
			 err->context.text != NULL ?
			 errcontext("%s", err->context.translated) : 0));
}

/*
 * Format the condition, untranslated, as delivery records it in last_error
 * (see the glossary); palloc'd, valid in the database encoding.
 */
char *
OutboxErrorText(const OutboxError *err)
{
	StringInfoData buf;

	Assert(OutboxErrorIsSet(err));

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s: %s", unpack_sql_state(err->sqlerrcode),
					 err->message.text);
	if (err->detail.text != NULL)
		appendStringInfo(&buf, "\nDETAIL: %s", err->detail.text);
	if (err->hint.text != NULL)
		appendStringInfo(&buf, "\nHINT: %s", err->hint.text);
	if (err->context.text != NULL)
		appendStringInfo(&buf, "\nCONTEXT: %s", err->context.text);

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
