SELECT outbox.append('t', 'evt.smoke.v1', '{"a": 1}', '00000000-0000-7000-8000-000000000001') AS id;
