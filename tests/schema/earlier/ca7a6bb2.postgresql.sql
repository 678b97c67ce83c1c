--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: agentgate_append_only(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.agentgate_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
        BEGIN
            RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP;
        END;
        $$;


--
-- Name: agentgate_audit_index_ref(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.agentgate_audit_index_ref() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
        DECLARE
            t text := encode(NEW.entry, 'escape');
            p integer := position(':"fer",' IN reverse(t));  -- the last ,"ref": from the end
            found text;
        BEGIN
            IF p > 0 THEN
                found := substring(right(t, p - 1) FROM '^([0-9]{1,18}),"resource":');
                IF found IS NOT NULL THEN
                    INSERT INTO audit_refs (idx, ref) VALUES (NEW.idx, found::bigint)
                    ON CONFLICT (idx) DO UPDATE SET ref = EXCLUDED.ref;
                END IF;
            END IF;
            RETURN NULL;
        END;
        $$;


--
-- Name: agentgate_audit_lock_next(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.agentgate_audit_lock_next() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(27416741019937140);  -- APPEND_LOCK, ASCII "agaudit"
            RETURN (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log);
        END;
        $$;


--
-- Name: agentgate_audit_next_index(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.agentgate_audit_next_index() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
        BEGIN
            IF NEW.idx IS DISTINCT FROM (SELECT COALESCE(MAX(idx) + 1, 0) FROM audit_log) THEN
                RAISE EXCEPTION 'audit_log: index % is not the next one', NEW.idx;
            END IF;
            RETURN NEW;
        END;
        $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: agentgate_dead_letters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_dead_letters (
    id text NOT NULL,
    recorded_at double precision NOT NULL,
    tool text NOT NULL,
    tenant text NOT NULL,
    principal text NOT NULL,
    run_id text,
    call_id text,
    idempotency_key text,
    arguments_digest text NOT NULL,
    authority_chain text NOT NULL,
    reason text NOT NULL,
    errors text NOT NULL
);


--
-- Name: agentgate_grants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_grants (
    id text NOT NULL,
    parent text,
    issuer text NOT NULL,
    audience text NOT NULL,
    expires bigint NOT NULL,
    recorded_at bigint NOT NULL,
    token text NOT NULL
);


--
-- Name: agentgate_nonces; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_nonces (
    expires bigint NOT NULL,
    principal text NOT NULL,
    nonce text NOT NULL
);


--
-- Name: agentgate_once; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_once (
    key text NOT NULL,
    allow_index bigint NOT NULL,
    state text NOT NULL,
    reservations text DEFAULT '[]'::text NOT NULL,
    CONSTRAINT agentgate_once_state_check CHECK ((state = ANY (ARRAY['started'::text, 'ok'::text, 'error'::text, 'paused'::text, 'not_run'::text])))
);


--
-- Name: agentgate_revocations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_revocations (
    grant_id text NOT NULL,
    revoked_at bigint NOT NULL,
    reason text DEFAULT ''::text NOT NULL
);


--
-- Name: agentgate_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_schema (
    id integer NOT NULL,
    version integer NOT NULL,
    CONSTRAINT agentgate_schema_id_check CHECK ((id = 1))
);


--
-- Name: agentgate_store_parts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agentgate_store_parts (
    part text NOT NULL,
    made text NOT NULL
);


--
-- Name: approval_asked; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approval_asked (
    approval_id text NOT NULL,
    audit_index bigint NOT NULL
);


--
-- Name: approval_calls; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approval_calls (
    approval_id text NOT NULL,
    call_key text NOT NULL,
    asked_in text NOT NULL
);


--
-- Name: approval_counted; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approval_counted (
    approval_id text NOT NULL,
    voters text NOT NULL
);


--
-- Name: approval_grants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approval_grants (
    approval_id text NOT NULL,
    grant_id text NOT NULL
);


--
-- Name: approval_votes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approval_votes (
    approval_id text NOT NULL,
    approver text NOT NULL,
    decided_at double precision NOT NULL
);


--
-- Name: approvals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approvals (
    id text NOT NULL,
    call_hash text NOT NULL,
    requester text NOT NULL,
    state text NOT NULL,
    approver text,
    quorum integer DEFAULT 1 NOT NULL,
    created double precision NOT NULL,
    expires_at double precision NOT NULL,
    decided_at double precision,
    consumed_at double precision,
    CONSTRAINT approvals_quorum_check CHECK ((quorum >= 1)),
    CONSTRAINT approvals_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'approved'::text, 'denied'::text, 'consumed'::text])))
);


--
-- Name: audit_checkpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_checkpoints (
    id bigint NOT NULL,
    size bigint NOT NULL,
    root bytea NOT NULL,
    note text NOT NULL,
    created text NOT NULL
);


--
-- Name: audit_checkpoints_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.audit_checkpoints ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_checkpoints_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    idx bigint NOT NULL,
    entry bytea NOT NULL,
    leaf_hash bytea NOT NULL,
    CONSTRAINT audit_log_leaf_hash_check CHECK ((octet_length(leaf_hash) = 32))
);


--
-- Name: audit_nodes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_nodes (
    level integer NOT NULL,
    "position" bigint NOT NULL,
    hash bytea NOT NULL
);


--
-- Name: audit_refs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_refs (
    idx bigint NOT NULL,
    ref bigint NOT NULL
);


--
-- Name: audit_refs_built; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_refs_built (
    built integer NOT NULL,
    CONSTRAINT audit_refs_built_built_check CHECK ((built = 1))
);


--
-- Name: audit_repairs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_repairs (
    id bigint NOT NULL,
    created text NOT NULL,
    what text NOT NULL,
    log_size bigint,
    checkpoint_size bigint,
    accepts bigint,
    accepted_by text,
    reason text
);


--
-- Name: audit_repairs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.audit_repairs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_repairs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: broker_decisions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.broker_decisions (
    broker text NOT NULL,
    request_id text NOT NULL,
    principal text NOT NULL,
    chain_hash text NOT NULL,
    resource text NOT NULL,
    audit_index bigint,
    cost_per_gpu_hour bigint,
    reservations text NOT NULL
);


--
-- Name: broker_leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.broker_leases (
    broker text NOT NULL,
    lease_id text NOT NULL,
    tenant text NOT NULL,
    priority integer NOT NULL,
    gpus text NOT NULL,
    state text NOT NULL,
    granted_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    notice_deadline double precision,
    preempted_by text,
    body text NOT NULL,
    CONSTRAINT broker_leases_state_check CHECK ((state = ANY (ARRAY['active'::text, 'notified'::text])))
);


--
-- Name: broker_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.broker_queue (
    broker text NOT NULL,
    request_id text NOT NULL,
    "position" integer NOT NULL,
    tenant text NOT NULL,
    priority integer NOT NULL,
    gpus integer NOT NULL,
    submitted_at double precision NOT NULL,
    deadline double precision,
    nominated text NOT NULL,
    victims text NOT NULL,
    body text NOT NULL
);


--
-- Name: broker_state; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.broker_state (
    broker text NOT NULL,
    taken_at double precision NOT NULL,
    generation bigint DEFAULT 0 NOT NULL
);


--
-- Name: broker_writer; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.broker_writer (
    broker text NOT NULL,
    writer text NOT NULL
);


--
-- Name: budget_ledger; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_ledger (
    grant_id text NOT NULL,
    cap bigint NOT NULL,
    remaining bigint NOT NULL,
    spent bigint DEFAULT 0 NOT NULL,
    CONSTRAINT budget_ledger_cap_check CHECK ((cap >= 0)),
    CONSTRAINT budget_ledger_remaining_check CHECK ((remaining >= 0))
);


--
-- Name: budget_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_reservations (
    id text NOT NULL,
    chain text NOT NULL,
    amount bigint NOT NULL,
    state text NOT NULL,
    actual bigint,
    created text NOT NULL,
    settled text,
    entry bigint,
    unit text,
    CONSTRAINT budget_reservations_amount_check CHECK ((amount >= 0)),
    CONSTRAINT budget_reservations_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'committed'::text, 'released'::text])))
);


--
-- Name: quota_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.quota_usage (
    quota text NOT NULL,
    window_start bigint NOT NULL,
    used bigint NOT NULL,
    CONSTRAINT quota_usage_used_check CHECK ((used >= 0))
);


--
-- Name: agentgate_dead_letters agentgate_dead_letters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_dead_letters
    ADD CONSTRAINT agentgate_dead_letters_pkey PRIMARY KEY (id);


--
-- Name: agentgate_grants agentgate_grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_grants
    ADD CONSTRAINT agentgate_grants_pkey PRIMARY KEY (id);


--
-- Name: agentgate_nonces agentgate_nonces_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_nonces
    ADD CONSTRAINT agentgate_nonces_pkey PRIMARY KEY (expires, principal, nonce);


--
-- Name: agentgate_once agentgate_once_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_once
    ADD CONSTRAINT agentgate_once_pkey PRIMARY KEY (key);


--
-- Name: agentgate_revocations agentgate_revocations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_revocations
    ADD CONSTRAINT agentgate_revocations_pkey PRIMARY KEY (grant_id);


--
-- Name: agentgate_schema agentgate_schema_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_schema
    ADD CONSTRAINT agentgate_schema_pkey PRIMARY KEY (id);


--
-- Name: agentgate_store_parts agentgate_store_parts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_store_parts
    ADD CONSTRAINT agentgate_store_parts_pkey PRIMARY KEY (part);


--
-- Name: approval_asked approval_asked_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_asked
    ADD CONSTRAINT approval_asked_pkey PRIMARY KEY (approval_id);


--
-- Name: approval_calls approval_calls_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_calls
    ADD CONSTRAINT approval_calls_pkey PRIMARY KEY (approval_id);


--
-- Name: approval_counted approval_counted_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_counted
    ADD CONSTRAINT approval_counted_pkey PRIMARY KEY (approval_id);


--
-- Name: approval_grants approval_grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_grants
    ADD CONSTRAINT approval_grants_pkey PRIMARY KEY (approval_id, grant_id);


--
-- Name: approval_votes approval_votes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_votes
    ADD CONSTRAINT approval_votes_pkey PRIMARY KEY (approval_id, approver);


--
-- Name: approvals approvals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (id);


--
-- Name: audit_checkpoints audit_checkpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_checkpoints
    ADD CONSTRAINT audit_checkpoints_pkey PRIMARY KEY (id);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (idx);


--
-- Name: audit_nodes audit_nodes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_nodes
    ADD CONSTRAINT audit_nodes_pkey PRIMARY KEY (level, "position");


--
-- Name: audit_refs_built audit_refs_built_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_refs_built
    ADD CONSTRAINT audit_refs_built_pkey PRIMARY KEY (built);


--
-- Name: audit_refs audit_refs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_refs
    ADD CONSTRAINT audit_refs_pkey PRIMARY KEY (idx);


--
-- Name: audit_repairs audit_repairs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_repairs
    ADD CONSTRAINT audit_repairs_pkey PRIMARY KEY (id);


--
-- Name: broker_decisions broker_decisions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.broker_decisions
    ADD CONSTRAINT broker_decisions_pkey PRIMARY KEY (broker, request_id);


--
-- Name: broker_leases broker_leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.broker_leases
    ADD CONSTRAINT broker_leases_pkey PRIMARY KEY (broker, lease_id);


--
-- Name: broker_queue broker_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.broker_queue
    ADD CONSTRAINT broker_queue_pkey PRIMARY KEY (broker, request_id);


--
-- Name: broker_state broker_state_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.broker_state
    ADD CONSTRAINT broker_state_pkey PRIMARY KEY (broker);


--
-- Name: broker_writer broker_writer_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.broker_writer
    ADD CONSTRAINT broker_writer_pkey PRIMARY KEY (broker);


--
-- Name: budget_ledger budget_ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_ledger
    ADD CONSTRAINT budget_ledger_pkey PRIMARY KEY (grant_id);


--
-- Name: budget_reservations budget_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_reservations
    ADD CONSTRAINT budget_reservations_pkey PRIMARY KEY (id);


--
-- Name: quota_usage quota_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.quota_usage
    ADD CONSTRAINT quota_usage_pkey PRIMARY KEY (quota, window_start);


--
-- Name: agentgate_dead_letters_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agentgate_dead_letters_time ON public.agentgate_dead_letters USING btree (recorded_at);


--
-- Name: agentgate_grants_parent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agentgate_grants_parent ON public.agentgate_grants USING btree (parent);


--
-- Name: approval_calls_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approval_calls_key ON public.approval_calls USING btree (call_key);


--
-- Name: approvals_call; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_call ON public.approvals USING btree (call_hash);


--
-- Name: audit_refs_by_ref; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX audit_refs_by_ref ON public.audit_refs USING btree (ref);


--
-- Name: agentgate_store_parts agentgate_store_parts_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agentgate_store_parts_append_only BEFORE DELETE OR UPDATE ON public.agentgate_store_parts FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.agentgate_store_parts ENABLE ALWAYS TRIGGER agentgate_store_parts_append_only;


--
-- Name: agentgate_store_parts agentgate_store_parts_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agentgate_store_parts_no_truncate BEFORE TRUNCATE ON public.agentgate_store_parts FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.agentgate_store_parts ENABLE ALWAYS TRIGGER agentgate_store_parts_no_truncate;


--
-- Name: audit_checkpoints audit_checkpoints_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_checkpoints_append_only BEFORE DELETE OR UPDATE ON public.audit_checkpoints FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_append_only;


--
-- Name: audit_checkpoints audit_checkpoints_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON public.audit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_truncate;


--
-- Name: audit_log audit_log_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_log ENABLE ALWAYS TRIGGER audit_log_append_only;


--
-- Name: audit_log audit_log_index_ref; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_index_ref AFTER INSERT ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.agentgate_audit_index_ref();


--
-- Name: audit_log audit_log_next_index; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_next_index BEFORE INSERT ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.agentgate_audit_next_index();

ALTER TABLE public.audit_log ENABLE ALWAYS TRIGGER audit_log_next_index;


--
-- Name: audit_log audit_log_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON public.audit_log FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_log ENABLE ALWAYS TRIGGER audit_log_no_truncate;


--
-- Name: audit_repairs audit_repairs_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_repairs_append_only BEFORE DELETE OR UPDATE ON public.audit_repairs FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_repairs ENABLE ALWAYS TRIGGER audit_repairs_append_only;


--
-- Name: audit_repairs audit_repairs_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_repairs_no_truncate BEFORE TRUNCATE ON public.audit_repairs FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();

ALTER TABLE public.audit_repairs ENABLE ALWAYS TRIGGER audit_repairs_no_truncate;


--
-- Name: approval_asked approval_asked_approval_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_asked
    ADD CONSTRAINT approval_asked_approval_id_fkey FOREIGN KEY (approval_id) REFERENCES public.approvals(id);


--
-- Name: approval_calls approval_calls_approval_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_calls
    ADD CONSTRAINT approval_calls_approval_id_fkey FOREIGN KEY (approval_id) REFERENCES public.approvals(id);


--
-- Name: approval_counted approval_counted_approval_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_counted
    ADD CONSTRAINT approval_counted_approval_id_fkey FOREIGN KEY (approval_id) REFERENCES public.approvals(id);


--
-- Name: approval_grants approval_grants_approval_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_grants
    ADD CONSTRAINT approval_grants_approval_id_fkey FOREIGN KEY (approval_id) REFERENCES public.approvals(id);


--
-- Name: approval_votes approval_votes_approval_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approval_votes
    ADD CONSTRAINT approval_votes_approval_id_fkey FOREIGN KEY (approval_id) REFERENCES public.approvals(id);


--
-- PostgreSQL database dump complete
--


