/*-------------------------------------------------------------------------
 *
 * outbox_error.h
 *		One error type for the errors the outbox raises and the errors it
 *		keeps as text (see outbox_error.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ERROR_H
#define OUTBOX_ERROR_H

/*
 * One part of a condition (message, detail, hint or context), formatted
 * twice: as delivery records it, untranslated, so that last_error does not
 * depend on the language of the session that delivered; and translated
 * for lc_messages, as errmsg() would, for raising it.
 */
typedef struct OutboxErrorPart
{
	char	   *text;			/* untranslated; NULL: the part is absent */
	char	   *translated;		/* may be the same string as text */
} OutboxErrorPart;

/*
 * An error condition, built once and then either raised or formatted as the
 * text that delivery records in last_error.  The strings are palloc'd in the
 * memory context current when they are set.
 */
typedef struct OutboxError
{
	int			sqlerrcode;		/* ERRCODE_*, as MAKE_SQLSTATE encodes it */
	OutboxErrorPart message;	/* primary message; absent until set */
	OutboxErrorPart detail;
	OutboxErrorPart hint;
	OutboxErrorPart context;
} OutboxError;

/* Has a condition been set? */
#define OutboxErrorIsSet(err)	((err)->message.text != NULL)

extern void OutboxErrorClear(OutboxError *err);
extern void OutboxErrorSet(OutboxError *err, int sqlerrcode,
						   const char *fmt,...) pg_attribute_printf(3, 4);
extern void OutboxErrorDetail(OutboxError *err,
							  const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorHint(OutboxError *err,
							const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorContext(OutboxError *err,
							   const char *fmt,...) pg_attribute_printf(2, 3);
extern void OutboxErrorRaise(int elevel, const OutboxError *err);
extern char *OutboxErrorText(const OutboxError *err);

/* Raise the condition as an ERROR; does not return. */
#define OutboxErrorThrow(err) \
	do { \
		OutboxErrorRaise(ERROR, (err)); \
		pg_unreachable(); \
	} while (0)

#endif							/* OUTBOX_ERROR_H */
