# The installed library needs no minimum minor release of PostgreSQL 15: it
# references no symbol that a later 15.x release added, except weakly.  A
# strong reference ("U" in nm -D) to such a symbol would make the library
# fail to load ("undefined symbol") into an older 15.x server.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Server functions an extension could call that came with a 15.x minor
# release, and the release.
my %later = (
	database_is_invalid_form => '15.4',
	database_is_invalid_oid => '15.4',
	libpqsrv_is_valid_proxy_option => '15.20',);

my $node = PostgreSQL::Test::Cluster->new('symbols');
my $lib = $node->config_data('--pkglibdir') . '/krizaka_outbox.so';
ok(-f $lib, "the library is installed");

my $nm = `nm -D --undefined-only '$lib' 2>&1`;
is($?, 0, 'nm -D lists its undefined symbols') or diag($nm);

# symbol (without its version) => nm's type letter: U strong, w/v weak
my %type;
for my $line (split /\n/, $nm)
{
	$type{$2} = $1 if $line =~ /^\s+([A-Za-z])\s+([^@\s]+)/;
}
cmp_ok(scalar(keys %type), '>', 10, 'it references server symbols');

for my $symbol (sort keys %later)
{
	ok(($type{$symbol} // 'w') =~ /^[wv]$/,
		"$symbol (from $later{$symbol}) is not referenced strongly");
}

# Built against 15.20 or later headers, the library checks proxy options
# where the server can: the reference is there, weak.
my ($minor) = ($node->config_data('--version') =~ /^PostgreSQL 15\.(\d+)/);
SKIP:
{
	skip 'built against headers older than 15.20', 1 unless defined $minor && $minor >= 20;
	is($type{libpqsrv_is_valid_proxy_option} // 'none', 'w',
		'libpqsrv_is_valid_proxy_option is a weak reference');
}

done_testing();
