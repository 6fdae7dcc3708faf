# Four workers drain four topics through the claim across all topics
# (complete_and_claim with topic NULL), as a pull worker's loop does: no
# claim may come back empty, nor short of its batch, while more due
# messages are free than the other three workers can be claiming at that
# moment (3 claims of 50).  Each worker records every empty or short claim
# with what was still free right after it.  A worker that stops or sleeps
# on an empty claim would otherwise stall with a backlog.  The same for a
# named subscription of the four topics.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('across4', '', "autovacuum = off\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	CREATE TABLE public.short (sub text, got int, free bigint);
	CREATE FUNCTION public.free(sub text) RETURNS bigint LANGUAGE sql AS $$
		SELECT CASE WHEN sub = '' THEN
			(SELECT count(*) FROM outbox.message m
			  WHERE m.delivered_at IS NULL AND m.dead_at IS NULL
			    AND m.available_at <= pg_catalog.now()
			    AND (m.leased_until IS NULL OR m.leased_until <= pg_catalog.now()))
		ELSE
			(SELECT sum(s.pending - s.in_flight)::bigint FROM outbox.subscription_stats s
			  WHERE s.subscription = sub)
		END $$;
});

# three topics of fresh messages, and one of messages appended with an
# available_at in the past (read as deferred ones)
$node->safe_psql('app', q{
	SELECT outbox.subscribe(t, 'feed', '-infinity') FROM unnest(ARRAY['a', 'b', 'c', 'd']) t;
	SELECT count(*) FROM unnest(ARRAY['a', 'b', 'c']) t, LATERAL outbox.append_batch(t, 'evt.v1',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 6000) i)) b;
	SELECT count(outbox.append('d', 'evt.v1', pg_catalog.jsonb_build_object('n', i), NULL,
		pg_catalog.now() - interval '1 minute')) FROM generate_series(1, 6000) i;
});
my $total = 24000;

my $dir = PostgreSQL::Test::Utils::tempdir;

# the pull loop of one worker, for subscription $sub ('' for the default)
sub drain
{
	my ($sub, $name) = @_;
	my $arg = $sub eq '' ? 'NULL' : "'$sub'";
	open my $f, '>', "$dir/$name.sql" or die;
	print $f <<"EOF";
SELECT count(*) AS n, coalesce(array_agg(id)::text, '{}') AS ids
  FROM outbox.complete_and_claim(':ids'::uuid[], 'w:client_id', NULL, 50, 30, $arg) \\gset
\\if :n < 50
INSERT INTO public.short SELECT '$sub', :n, public.free('$sub');
\\endif
EOF
	close $f;
	# 24,000 messages are 480 claims of 50: 4 workers of 600 claims each
	# run past the end of the backlog even when one worker takes most of
	# it (pgbench does not share the work evenly among its clients: in one
	# run of 200 claims each, one worker took none, another 10,000, and its
	# last claim leased a batch that no call completed)
	my $run = pgbench_start($node, 'app', '-c', '4', '-j', '2', '-t', '600',
		'-D', 'ids={}', '-f', "$dir/$name.sql");
	ok($run->(), "the workers of $name ran without error");
}

sub check
{
	my ($sub, $name) = @_;
	my $stats = $node->safe_psql('app', qq{
		SELECT count(*) FILTER (WHERE got = 0 AND free > 150),
		       count(*) FILTER (WHERE got > 0 AND free > 150),
		       coalesce(max(free), 0)
		  FROM public.short WHERE sub = '$sub'});
	my ($empty, $short, $most) = split /\|/, $stats;
	is($empty, '0', "$name: no claim came back empty while more than 150 were free"
		  . " (the most free after a short claim: $most)");
	is($short, '0', "$name: nor short of its batch");
	cmp_ok($node->safe_psql('app', qq{SELECT count(*) FROM public.short WHERE sub = '$sub'}),
		'>=', 4, "$name: each worker ran past the end of the backlog");
}

drain('', 'default');
check('', 'the default subscription');
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL AND attempts = 1), count(*)
	  FROM outbox.message}),
	"$total|$total", 'every message was delivered, each at its first claim')
  or diag($node->safe_psql('app', q{
	SELECT 'attempts ' || attempts || ', delivered ' || (delivered_at IS NOT NULL)
	       || ', leased ' || (leased_until IS NOT NULL) || ' by ' || coalesce(lease_owner, '-')
	       || ': ' || count(*) || ' (topics ' || string_agg(DISTINCT topic, ',') || ')'
	  FROM outbox.message GROUP BY attempts, delivered_at IS NOT NULL,
	       leased_until IS NOT NULL, lease_owner ORDER BY 1}));

drain('feed', 'feed');
check('feed', 'the named subscription');
is($node->safe_psql('app', q{
	SELECT sum(pending), sum(dead) FROM outbox.subscription_stats WHERE subscription = 'feed'}),
	'0|0', 'the named subscription is done with every message');

done_testing();
