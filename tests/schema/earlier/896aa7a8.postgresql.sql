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
    principal text NOT NULL,
    nonce text NOT NULL,
    expires bigint NOT NULL
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
-- Name: approvals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approvals (
    id text NOT NULL,
    call_hash text NOT NULL,
    requester text NOT NULL,
    state text NOT NULL,
    approver text,
    created double precision NOT NULL,
    expires_at double precision NOT NULL,
    decided_at double precision,
    consumed_at double precision,
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
    taken_at double precision NOT NULL
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
    CONSTRAINT budget_reservations_amount_check CHECK ((amount >= 0)),
    CONSTRAINT budget_reservations_state_check CHECK ((state = ANY (ARRAY['reserved'::text, 'committed'::text, 'released'::text])))
);


--
-- Name: agentgate_grants agentgate_grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_grants
    ADD CONSTRAINT agentgate_grants_pkey PRIMARY KEY (id);


--
-- Name: agentgate_nonces agentgate_nonces_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_nonces
    ADD CONSTRAINT agentgate_nonces_pkey PRIMARY KEY (principal, nonce);


--
-- Name: agentgate_revocations agentgate_revocations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agentgate_revocations
    ADD CONSTRAINT agentgate_revocations_pkey PRIMARY KEY (grant_id);


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
-- Name: agentgate_grants_parent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agentgate_grants_parent ON public.agentgate_grants USING btree (parent);


--
-- Name: agentgate_nonces_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agentgate_nonces_expires ON public.agentgate_nonces USING btree (expires);


--
-- Name: approvals_call; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_call ON public.approvals USING btree (call_hash);


--
-- Name: audit_checkpoints audit_checkpoints_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_checkpoints_append_only BEFORE DELETE OR UPDATE ON public.audit_checkpoints FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();


--
-- Name: audit_checkpoints audit_checkpoints_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON public.audit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();


--
-- Name: audit_log audit_log_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.agentgate_append_only();


--
-- Name: audit_log audit_log_next_index; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_next_index BEFORE INSERT ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.agentgate_audit_next_index();


--
-- Name: audit_log audit_log_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON public.audit_log FOR EACH STATEMENT EXECUTE FUNCTION public.agentgate_append_only();


--
-- PostgreSQL database dump complete
--


