-- Retention: detach and drop the day partitions that end before ``cutoff``.
-- Returns the names of the partitions dropped. Serialised with partition creation.
CREATE FUNCTION audit_drop_partitions_before(cutoff date) RETURNS SETOF text
LANGUAGE plpgsql AS $fn$
DECLARE
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '.audit_partitions'));
    FOR part IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = (quote_ident(current_schema()) || '.audit_log')::regclass
          AND c.relname ~ '^audit_log_p[0-9]{8}$'
          AND to_date(substr(c.relname, 12), 'YYYYMMDD') < cutoff
        ORDER BY c.relname
    LOOP
        EXECUTE format('ALTER TABLE %I.audit_log DETACH PARTITION %I.%I',
                       current_schema(), current_schema(), part);
        EXECUTE format('DROP TABLE %I.%I', current_schema(), part);
        RETURN NEXT part;
    END LOOP;
END
$fn$;
