/*-------------------------------------------------------------------------
 *
 * outbox_http_addr.c
 *		The addresses an HTTP route may connect to: the classifier that
 *		refuses loopback, private, link-local, metadata and other special
 *		addresses, and the setting outbox.http_private_networks that lets
 *		some of them through.
 *
 * An HTTP call leaves from the database server, inside its network; a
 * route's URL must not make it a way into that network (server-side
 * request forgery).  Names are not checked, addresses are: libcurl asks
 * HttpAddressAllowed about each address just before it connects to it
 * (outbox_http_call.c), so a name that resolves differently at delivery
 * than at creation, or to several addresses, is judged by what is
 * actually reached.  An IPv6 address that carries an IPv4 address (mapped,
 * compatible, translated, NAT64, 6to4) is judged by the IPv4 address too.
 *
 * A refused address is let through when outbox.http_allow_private is on,
 * or when it (or the IPv4 address it carries) is inside one of the
 * networks of outbox.http_private_networks.  That list is parsed once, by
 * the setting's check hook, into memory the GUC machinery owns; the assign
 * hook publishes it here.
 *
 * HttpAddressAllowed runs inside libcurl's callbacks: it neither
 * allocates nor raises an error.
 *
 * Glossary:
 *	network		an address and a prefix length (a CIDR); a bare address
 *				is a network of one
 *	embedded	the IPv4 address that an IPv6 address of a transition
 *				mechanism carries
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "utils/guc.h"
#include "utils/varlena.h"

#include "outbox.h"
#include "outbox_compat.h"
#include "outbox_http.h"

/* a network: the first prefix bits of addr (4 bytes for IPv4, 16 for IPv6) */
typedef struct ObxNet
{
	int			family;			/* AF_INET or AF_INET6 */
	int			bits;			/* the prefix length */
	uint8		addr[16];
} ObxNet;

/* what is wrong with the text of a network */
typedef enum ObxNetProblem
{
	OBX_NET_OK,
	OBX_NET_SYNTAX,				/* not an address, or a bad prefix length */
	OBX_NET_PREFIX,				/* a prefix longer than the address */
	OBX_NET_HOST_BITS			/* bits set after the prefix */
} ObxNetProblem;

/* the parsed outbox.http_private_networks: the GUC's extra */
typedef struct ObxNetList
{
	int			count;
	ObxNet		nets[FLEXIBLE_ARRAY_MEMBER];
} ObxNetList;

/* a special range, refused unless let through */
typedef struct ObxRange
{
	const char *cidr;
	const char *what;			/* what it is, after "It is in <cidr>, " */
	ObxNet		net;			/* parsed from cidr on first use */
} ObxRange;

/* an IPv6 form that carries an IPv4 address, and where */
typedef struct ObxEmbedding
{
	const char *cidr;
	const char *what;
	int			offset;			/* of the IPv4 address, in bytes */
	ObxNet		net;
} ObxEmbedding;

/* the cloud providers' instance metadata services */
static ObxRange obx_metadata[] = {
	{"169.254.169.254/32", "a cloud metadata address"},
	{"100.100.100.200/32", "a cloud metadata address"},
	{"fd00:ec2::254/128", "a cloud metadata address"},
};

/* the IPv4 special-purpose ranges that are not the public Internet */
static ObxRange obx_ranges4[] = {
	{"0.0.0.0/8", "the unspecified network"},
	{"10.0.0.0/8", "a private network"},
	{"100.64.0.0/10", "the shared address space of carrier-grade NAT"},
	{"127.0.0.0/8", "the loopback network"},
	{"169.254.0.0/16", "the link-local network"},
	{"172.16.0.0/12", "a private network"},
	{"192.0.0.0/24", "the IETF protocol assignments"},
	{"192.0.2.0/24", "a documentation network"},
	{"192.88.99.0/24", "the 6to4 relay anycast network"},
	{"192.168.0.0/16", "a private network"},
	{"198.18.0.0/15", "the benchmarking network"},
	{"198.51.100.0/24", "a documentation network"},
	{"203.0.113.0/24", "a documentation network"},
	{"224.0.0.0/4", "the multicast range"},
	{"240.0.0.0/4", "the reserved range"},	/* and the broadcast address */
};

/* the same for IPv6; the forms that carry an IPv4 address are below */
static ObxRange obx_ranges6[] = {
	{"::/128", "the unspecified address"},
	{"::1/128", "the loopback address"},
	{"64:ff9b:1::/48", "the local-use NAT64 network"},
	{"100::/64", "the discard-only network"},
	{"2001::/32", "Teredo"},
	{"2001::/23", "the IETF protocol assignments"},
	{"2001:db8::/32", "a documentation network"},
	{"3fff::/20", "a documentation network"},
	{"fc00::/7", "a unique local network"},
	{"fe80::/10", "the link-local network"},
	{"fec0::/10", "the site-local network"},
	{"ff00::/8", "the multicast range"},
};

static ObxEmbedding obx_embeddings[] = {
	{"::ffff:0:0/96", "IPv4-mapped", 12},
	{"::ffff:0:0:0/96", "IPv4-translated", 12},
	{"64:ff9b::/96", "NAT64", 12},
	{"::/96", "IPv4-compatible", 12},
	{"2002::/16", "6to4", 2},
};

/* the networks of outbox.http_private_networks; NULL: none */
static const ObxNetList *obx_private_networks = NULL;

/* bumped whenever the rules change: see HttpFilterChanged */
static uint64 obx_filter_generation = 0;

static bool obx_tables_parsed = false;

static void obx_parse_tables(void);
static ObxNetProblem obx_parse_net(const char *text, ObxNet *net);
static bool obx_net_contains(const ObxNet *net, int family, const uint8 *addr);
static const ObxRange *obx_find_range(ObxRange *ranges, int nranges,
									  int family, const uint8 *addr);
static const ObxRange *obx_classify4(const uint8 *addr);
static bool obx_listed(int family, const uint8 *addr);

/* ---------------------------------------------------------------------
 * The classifier
 * ---------------------------------------------------------------------
 */

/*
 * May an HTTP call connect to addr?  When it may not, why receives a
 * sentence saying what the address is.  Neither allocates nor raises: it
 * runs inside libcurl's callbacks.
 */
bool
HttpAddressAllowed(const struct sockaddr *addr, socklen_t len,
				   char *why, size_t whylen)
{
	int			family = addr->sa_family;
	const uint8 *bytes;
	const ObxRange *range;
	int			i;

	if (family == AF_INET && len >= sizeof(struct sockaddr_in))
		bytes = (const uint8 *) &((const struct sockaddr_in *) addr)->sin_addr;
	else if (family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
		bytes = (const uint8 *) &((const struct sockaddr_in6 *) addr)->sin6_addr;
	else
	{
		snprintf(why, whylen, "It is not an IP address.");
		return false;
	}

	if (outbox_http_allow_private || obx_listed(family, bytes))
		return true;

	obx_parse_tables();
	range = obx_find_range(obx_metadata, lengthof(obx_metadata), family, bytes);
	if (range != NULL)
	{
		snprintf(why, whylen, "It is %s.", range->what);
		return false;
	}
	if (family == AF_INET)
	{
		range = obx_classify4(bytes);
		if (range != NULL)
			snprintf(why, whylen, "It is in %s, %s.", range->cidr, range->what);
		return range == NULL;
	}

	range = obx_find_range(obx_ranges6, lengthof(obx_ranges6), family, bytes);
	if (range != NULL)
	{
		snprintf(why, whylen, "It is in %s, %s.", range->cidr, range->what);
		return false;
	}

	/* the address is public, unless it carries a refused IPv4 address */
	for (i = 0; i < lengthof(obx_embeddings); i++)
	{
		const ObxEmbedding *form = &obx_embeddings[i];
		const uint8 *v4 = bytes + form->offset;
		char		text[INET_ADDRSTRLEN];

		if (!obx_net_contains(&form->net, AF_INET6, bytes))
			continue;
		range = obx_find_range(obx_metadata, lengthof(obx_metadata), AF_INET, v4);
		if (range == NULL)
			range = obx_classify4(v4);
		if (range == NULL)
			return true;
		if (inet_ntop(AF_INET, v4, text, sizeof(text)) == NULL)
			strlcpy(text, "?", sizeof(text));
		if (range->net.bits == 32)
			snprintf(why, whylen, "It carries %s (%s), %s.",
					 text, form->what, range->what);
		else
			snprintf(why, whylen, "It carries %s (%s), which is in %s, %s.",
					 text, form->what, range->cidr, range->what);
		return false;
	}
	return true;
}

/* The special range of IPv4 addr, or NULL for a public address. */
static const ObxRange *
obx_classify4(const uint8 *addr)
{
	return obx_find_range(obx_ranges4, lengthof(obx_ranges4), AF_INET, addr);
}

/* The first of ranges that holds addr, or NULL. */
static const ObxRange *
obx_find_range(ObxRange *ranges, int nranges, int family, const uint8 *addr)
{
	int			i;

	for (i = 0; i < nranges; i++)
	{
		if (obx_net_contains(&ranges[i].net, family, addr))
			return &ranges[i];
	}
	return NULL;
}

/*
 * Is addr, or the IPv4 address it carries, inside a network of
 * outbox.http_private_networks?
 */
static bool
obx_listed(int family, const uint8 *addr)
{
	const ObxNetList *list = obx_private_networks;
	int			i;
	int			j;

	if (list == NULL || list->count == 0)
		return false;

	obx_parse_tables();
	for (i = 0; i < list->count; i++)
	{
		if (obx_net_contains(&list->nets[i], family, addr))
			return true;
		if (family != AF_INET6 || list->nets[i].family != AF_INET)
			continue;
		for (j = 0; j < lengthof(obx_embeddings); j++)
		{
			if (obx_net_contains(&obx_embeddings[j].net, AF_INET6, addr) &&
				obx_net_contains(&list->nets[i], AF_INET,
								 addr + obx_embeddings[j].offset))
				return true;
		}
	}
	return false;
}

/* Does net hold addr, of family? */
static bool
obx_net_contains(const ObxNet *net, int family, const uint8 *addr)
{
	int			whole = net->bits / 8;
	int			rest = net->bits % 8;

	if (net->family != family)
		return false;
	if (memcmp(net->addr, addr, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((net->addr[whole] ^ addr[whole]) & (0xFF << (8 - rest)) & 0xFF) == 0;
}

/* Parse the tables above, once: their texts are known to be valid. */
static void
obx_parse_tables(void)
{
	int			i;

	if (obx_tables_parsed)
		return;
	for (i = 0; i < lengthof(obx_metadata); i++)
		(void) obx_parse_net(obx_metadata[i].cidr, &obx_metadata[i].net);
	for (i = 0; i < lengthof(obx_ranges4); i++)
		(void) obx_parse_net(obx_ranges4[i].cidr, &obx_ranges4[i].net);
	for (i = 0; i < lengthof(obx_ranges6); i++)
		(void) obx_parse_net(obx_ranges6[i].cidr, &obx_ranges6[i].net);
	for (i = 0; i < lengthof(obx_embeddings); i++)
		(void) obx_parse_net(obx_embeddings[i].cidr, &obx_embeddings[i].net);
	obx_tables_parsed = true;
}

/*
 * Parse a network: an IPv4 or IPv6 address, then optionally / and a prefix
 * length (none: the address alone).  The address must have no bit set
 * after the prefix, as a cidr value must not.  Neither allocates nor
 * raises.
 */
static ObxNetProblem
obx_parse_net(const char *text, ObxNet *net)
{
	char		addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(text, '/');
	size_t		addrlen = slash ? (size_t) (slash - text) : strlen(text);
	int			maxbits;
	int			i;

	memset(net, 0, sizeof(ObxNet));
	if (addrlen == 0 || addrlen >= sizeof(addr))
		return OBX_NET_SYNTAX;
	memcpy(addr, text, addrlen);
	addr[addrlen] = '\0';

	if (inet_pton(AF_INET, addr, net->addr) == 1)
		net->family = AF_INET;
	else if (inet_pton(AF_INET6, addr, net->addr) == 1)
		net->family = AF_INET6;
	else
		return OBX_NET_SYNTAX;
	maxbits = net->family == AF_INET ? 32 : 128;

	net->bits = maxbits;
	if (slash != NULL)
	{
		const char *p = slash + 1;

		if (*p == '\0' || strlen(p) > 3)
			return OBX_NET_SYNTAX;
		net->bits = 0;
		for (; *p; p++)
		{
			if (*p < '0' || *p > '9')
				return OBX_NET_SYNTAX;
			net->bits = net->bits * 10 + (*p - '0');
		}
		if (net->bits > maxbits)
			return OBX_NET_PREFIX;
	}

	for (i = net->bits; i < maxbits; i++)
	{
		if (net->addr[i / 8] & (0x80 >> (i % 8)))
			return OBX_NET_HOST_BITS;
	}
	return OBX_NET_OK;
}

/* ---------------------------------------------------------------------
 * outbox.http_private_networks
 * ---------------------------------------------------------------------
 */

/*
 * The check hook of outbox.http_private_networks: a comma-separated list
 * of networks (see obx_parse_net), parsed into *extra.
 */
bool
HttpCheckPrivateNetworks(char **newval, void **extra)
{
	char	   *raw;
	List	   *items;
	ListCell   *lc;
	ObxNetList *list;
	int			count = 0;

	raw = pstrdup(*newval != NULL ? *newval : "");
	if (!SplitGUCList(raw, ',', &items))
	{
		GUC_check_errdetail("List syntax is invalid.");
		pfree(raw);
		return false;
	}

	list = ObxGucMalloc(LOG, offsetof(ObxNetList, nets) +
						Max(list_length(items), 1) * sizeof(ObxNet));
	if (list == NULL)
	{
		list_free(items);
		pfree(raw);
		return false;
	}

	foreach(lc, items)
	{
		const char *item = (const char *) lfirst(lc);
		ObxNetProblem problem = obx_parse_net(item, &list->nets[count]);

		if (problem != OBX_NET_OK)
		{
			if (problem == OBX_NET_PREFIX)
				GUC_check_errdetail("\"%s\" has a prefix longer than its address.",
									item);
			else if (problem == OBX_NET_HOST_BITS)
				GUC_check_errdetail("\"%s\" has bits set to the right of its prefix.",
									item);
			else
				GUC_check_errdetail("\"%s\" is not an IP address or network.",
									item);
			GUC_check_errhint("Give each network as an address and a prefix length, such as 10.1.0.0/16 or fd12:3456::/48.");
			ObxGucFree(list);
			list_free(items);
			pfree(raw);
			return false;
		}
		count++;
	}
	list->count = count;

	list_free(items);
	pfree(raw);
	*extra = list;
	return true;
}

/* The assign hook of outbox.http_private_networks: publish the list. */
void
HttpAssignPrivateNetworks(const char *newval, void *extra)
{
	obx_private_networks = (const ObxNetList *) extra;
	HttpFilterChanged();
}

/*
 * The address filter may have changed (a setting was assigned): a
 * connection kept open from before was judged by the old rules, so none
 * is used again (outbox_http_conn.c compares generations).
 */
void
HttpFilterChanged(void)
{
	obx_filter_generation++;
}

/* The generation of the filter's rules, for kept connections. */
uint64
HttpFilterGeneration(void)
{
	return obx_filter_generation;
}
