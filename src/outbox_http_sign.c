/*-------------------------------------------------------------------------
 *
 * outbox_http_sign.c
 *		The signatures of HTTP routes, by the Standard Webhooks
 *		specification: the secret's form, the signature of one attempt, the
 *		fingerprint that outbox.routes shows in place of the secret, and
 *		outbox.webhook_signature() for receivers' tests.
 *
 * A secret is "whsec_" followed by the base64 of its key, 24 to 64 bytes.
 * An attempt is signed over "{webhook-id}.{webhook-timestamp}.{body}" with
 * HMAC-SHA256 under the key; the header carries "v1," and the base64 of
 * the digest.  The server's own HMAC and base64 do the work (OpenSSL's,
 * in a server built with it).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/base64.h"
#include "common/cryptohash.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "outbox_compat.h"
#include "outbox_http.h"
#include "outbox_validate.h"

PG_FUNCTION_INFO_V1(outbox_webhook_signature);

static ObxNoreturn void obx_secret_invalid(const char *detail);

/* Refuse a secret, saying why; the secret itself is never echoed. */
static void
obx_secret_invalid(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid webhook secret"),
			 errdetail_internal("%s", detail),
			 errhint("A secret is \"%s\" followed by the base64 of a key of %d to %d bytes.",
					 WEBHOOK_SECRET_PREFIX, WEBHOOK_KEY_MIN, WEBHOOK_KEY_MAX)));
	pg_unreachable();
}

/*
 * The key of secret, into key (WEBHOOK_KEY_MAX bytes); returns its length.
 * Raises 22023 for a secret of another form.
 */
int
WebhookSecretKey(const char *secret, uint8 *key)
{
	size_t		prefix = strlen(WEBHOOK_SECRET_PREFIX);
	const char *b64;
	int			b64len;
	uint8		buf[WEBHOOK_KEY_MAX + 4];
	int			len;

	if (strncmp(secret, WEBHOOK_SECRET_PREFIX, prefix) != 0)
		obx_secret_invalid("The secret does not start with \"" WEBHOOK_SECRET_PREFIX "\".");
	b64 = secret + prefix;
	b64len = strlen(b64);
	if (b64len == 0 || b64len > pg_b64_enc_len(WEBHOOK_KEY_MAX) ||
		pg_b64_dec_len(b64len) > (int) sizeof(buf))
		obx_secret_invalid("The key is not 24 to 64 bytes long.");
	len = ObxB64Decode(b64, b64len, buf, sizeof(buf));
	if (len < 0)
		obx_secret_invalid("The key is not valid base64.");
	if (len < WEBHOOK_KEY_MIN || len > WEBHOOK_KEY_MAX)
		obx_secret_invalid(psprintf("The key is %d bytes long.", len));
	memcpy(key, buf, len);
	explicit_bzero(buf, sizeof(buf));
	return len;
}

/*
 * The signature of one attempt: "v1," and the base64 of HMAC-SHA256 of
 * "{msg_id}.{timestamp}.{body}" under key.  palloc'd.
 */
char *
WebhookSignature(const uint8 *key, int keylen, const char *msg_id,
				 int64 timestamp, const char *body, size_t len)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char		ts[32];
	char	   *result;
	int			n;

	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	snprintf(ts, sizeof(ts), "." INT64_FORMAT ".", timestamp);
	if (pg_hmac_init(ctx, key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) msg_id, strlen(msg_id)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ts, strlen(ts)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) body, len) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
	{
		const char *why = pg_hmac_error(ctx);

		pg_hmac_free(ctx);
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute a webhook signature: %s", why)));
	}
	pg_hmac_free(ctx);

	result = palloc(3 + pg_b64_enc_len(sizeof(digest)) + 1);
	memcpy(result, "v1,", 3);
	n = ObxB64Encode(digest, sizeof(digest), result + 3,
					 pg_b64_enc_len(sizeof(digest)));
	if (n < 0)
		elog(ERROR, "could not encode a webhook signature");
	result[3 + n] = '\0';
	return result;
}

/*
 * What outbox.routes shows of a secret: the first 16 hex digits of the
 * SHA-256 of its key, enough to tell secrets apart, nothing to sign with.
 */
char *
WebhookSecretFingerprint(const char *secret)
{
	uint8		key[WEBHOOK_KEY_MAX];
	int			keylen = WebhookSecretKey(secret, key);
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *hex = palloc(17);

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, key, keylen) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute the fingerprint of a webhook secret")));
	pg_cryptohash_free(ctx);
	explicit_bzero(key, sizeof(key));
	for (int i = 0; i < 8; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return hex;
}

/*
 * outbox.webhook_signature(secret, msg_id, ts, body): the signature a
 * route with this secret sends for that attempt, for receivers to test
 * their verification against.
 */
Datum
outbox_webhook_signature(PG_FUNCTION_ARGS)
{
	char	   *secret;
	char	   *msg_id;
	int64		ts;
	text	   *body;
	uint8		key[WEBHOOK_KEY_MAX];
	int			keylen;
	char	   *sig;

	CheckNotNull(PG_ARGISNULL(0), "secret");
	CheckNotNull(PG_ARGISNULL(1), "msg_id");
	CheckNotNull(PG_ARGISNULL(2), "ts");
	CheckNotNull(PG_ARGISNULL(3), "body");
	secret = text_to_cstring(PG_GETARG_TEXT_PP(0));
	msg_id = text_to_cstring(PG_GETARG_TEXT_PP(1));
	ts = PG_GETARG_INT64(2);
	body = PG_GETARG_TEXT_PP(3);
	keylen = WebhookSecretKey(secret, key);

	sig = WebhookSignature(key, keylen, msg_id, ts, VARDATA_ANY(body),
						   VARSIZE_ANY_EXHDR(body));
	explicit_bzero(key, sizeof(key));
	PG_RETURN_TEXT_P(cstring_to_text(sig));
}
