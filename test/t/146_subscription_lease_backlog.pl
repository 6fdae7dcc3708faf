# More leases of a named subscription ran out than a claim's batch holds:
# the next claims of the same session take the rest over at once.  A
# session's claims look for leases that ran out at most once a second,
# from where their last look ended; a look that filled its batch must not
# move that mark past the leases it left, which would wait for the look
# from the first that comes once a minute.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = PostgreSQL::Test::Cluster->new('lease_backlog');
$node->init;
$node->append_conf('postgresql.conf', q{shared_preload_libraries = 'krizaka_outbox'});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('g', 's');
	SELECT outbox.append('g', 'evt.g.v1', pg_catalog.jsonb_build_object('n', i))
	  FROM pg_catalog.generate_series(1, 120) i;
});

# a session that leases all 120 for 10 s and leaves them
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.claim('gone', 'g', 200, 10, 's')}),
	'120', 'one claim leases the 120 messages for 10 s');
# (leased at once without keys: one lease row, leases by range)
is($node->safe_psql('app', q{
	SELECT pg_catalog.sum(pg_catalog.cardinality(seqs)) FROM outbox.subscription_lease}),
	'120', 'the 120 leases are one lease by range');
ok(wait_for($node, 'app', q{
	SELECT count(*) FROM outbox.subscription_lease WHERE leased_until < pg_catalog.now()}, '1', 30),
	'their leases ran out');

my $w = $node->background_psql('app');
my @got;
for (1 .. 3)
{
	my $n = $w->query_safe(q{
		SELECT count(*) FILTER (WHERE attempts = 2) FROM outbox.claim('w', 'g', 50, 30, 's')});
	chomp $n;
	push @got, $n;
}
is(join(' ', @got), '50 50 20',
	'three claims of 50 in a row take the 120 over: the look that filled its batch looked again');
$w->quit;

$node->stop;
done_testing();
