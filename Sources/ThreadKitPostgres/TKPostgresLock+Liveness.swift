// TKPostgresLock+Liveness: noticing that the session holding the lock died, and telling the
// holder. Two detectors, both on the session's event-loop thread:
//   1. the connection's close future: the server ended the session (pg_terminate_backend: FATAL
//      57P01, a restart, an idle-session timeout) or the connection was cut and the kernel said
//      so — noticed at once;
//   2. a check every `livenessInterval`: the session must answer that it still holds the granted
//      advisory lock. A check that fails, says "not granted", or is still unanswered after three
//      intervals (a silent network partition) declares the lock lost and closes the session, so a
//      partitioned holder stops believing it holds the lock within about 3 × livenessInterval.
//      The server, on its side, keeps the lock until it notices the dead connection (TCP
//      keepalive): that gap is what fencing tokens are for.
// Declaring a loss: under `stateLock`, and only for the acquisition (`generation`) it concerns;
// the holding becomes .lost, the timer stops, and `onLost` is queued on `notifications`.
#if Postgres
    import PostgresNIO
    import ThreadKit

    extension TKPostgresLock {
        /// Detector 1, registered once per session (when it becomes this object's session): when the
        /// connection closes, the acquisition held on it, if any, is lost.
        func watchClose(of session: PostgresSession) {
            session.connection.closeFuture.whenComplete { [weak self, weak session] _ in
                guard let self, let session else { return }
                let generation = self.stateLock.withLock { () -> UInt64? in
                    guard case .held(let hold) = self.state.holding, hold.session === session else { return nil }
                    return hold.generation
                }
                guard let generation else { return }
                self.declareLost(
                    generation: generation,
                    TKError(
                        .systemCall,
                        "\(self.owner): the session holding the lock (server pid "
                            + "\(session.backendPID)) ended: the server restarted, the connection was cut, or someone called "
                            + "pg_terminate_backend (breakLock).", errno: ECONNRESET))
            }
        }

        /// Starts detector 2 for the acquisition `generation` held on `session`.
        func watch(_ session: PostgresSession, generation: UInt64) {
            let interval = TimeAmount.nanoseconds(DeadlineArithmetic.nanoseconds(livenessInterval))
            let task = session.connection.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { [weak self] task in
                guard let self else {
                    task.cancel()
                    return
                }
                self.check(session, generation: generation)
            }
            let stale = stateLock.withLock { () -> Bool in
                guard case .held(let hold) = state.holding, hold.generation == generation else { return true }
                state.liveness = task
                state.checkInFlightSince = nil
                return false
            }
            if stale { task.cancel() }
        }

        /// One liveness check (event-loop thread).
        private func check(_ session: PostgresSession, generation: UInt64) {
            let now = ContinuousClock.now
            let overdue = stateLock.withLock { () -> Bool? in
                guard case .held(let hold) = state.holding, hold.generation == generation else { return nil }
                if let since = state.checkInFlightSince { return now - since > livenessInterval * 3 }
                state.checkInFlightSince = now
                return false
            }
            guard let overdue else { return }
            if overdue {
                // Counted closed before the loss is announced (an `onLost` handler, or a caller it
                // wakes, that calls `lock(before:)` at once must connect a new session), and its
                // channel closed after (closing fails the check in flight, whose error would be
                // announced instead of this one).
                session.markClosed()
                declareLost(
                    generation: generation,
                    TKError(
                        .systemCall,
                        "\(owner): the session holding the lock (server pid "
                            + "\(session.backendPID)) has not answered for \(livenessInterval * 3); it is treated as lost (a network "
                            + "partition, or a server that stopped).", errno: ETIMEDOUT))
                session.close()
                return
            }
            let query: PostgresQuery =
                "SELECT count(*) FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.classid = \(Int64(UInt32(bitPattern: LockSchema.namespace)))::oid AND l.objid = \(Int64(key))::oid AND l.objsubid = 2 AND l.granted"
            session.connection.query(query, logger: PostgresSession.logger).whenComplete { [weak self] result in
                guard let self else { return }
                switch result {
                case .success(let rows):
                    let granted = ((try? rows.rows.first?.decode(Int64.self)) ?? 0) > 0
                    if granted {
                        self.stateLock.withLock { self.state.checkInFlightSince = nil }
                    } else {
                        self.declareLost(
                            generation: generation,
                            TKError(
                                .notLockOwner,
                                "\(self.owner): the session (server pid "
                                    + "\(session.backendPID)) no longer holds the advisory lock (pg_advisory_unlock_all or DISCARD ALL ran in it)."
                            ))
                    }
                case .failure(let error):
                    session.close() // before the loss is announced, as above
                    self.declareLost(
                        generation: generation,
                        self.configuration.queryError(error, owner: self.owner, what: "checking that the lock is held"))
                }
            }
        }

        /// Marks the acquisition `generation` lost (once) and queues `onLost`.
        func declareLost(generation: UInt64, _ error: TKError) {
            let loss = stateLock.withLock { () -> Loss? in
                guard case .held(let hold) = state.holding, hold.generation == generation else { return nil }
                state.holding = .lost(hold, error)
                state.liveness?.cancel()
                state.liveness = nil
                return Loss(token: hold.token, error: error)
            }
            guard let loss, let onLost else { return }
            notifications.async { onLost(loss) }
        }
    }
#endif
