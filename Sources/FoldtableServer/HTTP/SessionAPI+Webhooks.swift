import FoldtableCore

/// The webhook routes (owner only): `PUT`, `GET` and `DELETE /api/v1/sessions/NAME/webhook`, and
/// `POST .../webhook/resume`. The secret is answered once, by the PUT that generated it; no other
/// answer (GET, the export, logs) ever carries it.
extension SessionAPI {
    /// `PUT .../webhook` with `{"url":"https://...","secret":"whsec_..."}` (secret optional: one
    /// is generated and answered once). Deliveries start with the session's next change.
    func putWebhook(_ call: Call, _ respond: @escaping Respond) {
        guard let webhooks = hub.webhooks else { return respond(Self.webhooksUnavailable) }
        guard mediaType(call.request) == "application/json" else { return respond(unsupportedMediaType(["application/json"])) }
        let url: WebhookURL
        let given: String?
        do throws(ProtocolError) {
            let reader = try FieldReader(try JSONParser.parse(call.request.body, limits: hub.messageLimits.json))
            url = try WebhookURL(try reader.string("url"))
            given = try reader.optionalString("secret")
        } catch {
            return respond(Self.error(400, error))
        }
        if let category = url.literalRefusal(webhooks.settings.policy) {
            return respond(
                Self.error(
                    400,
                    ProtocolError(
                        .invalidValue, "url's host \(url.host) is a \(category.rawValue) address, which --webhook-allow does not list", field: "url"))
            )
        }
        let secret: WebhookSecret
        do {
            secret = try given.map { text throws(ProtocolError) in try WebhookSecret(text) } ?? WebhookSecret.generate()
        } catch {
            return respond(Self.error(400, error))
        }
        withSession(call, respond) { session in
            webhooks.set(session, url: url, secret: secret) { result in
                let from: UInt64
                switch result {
                case .success(let cursor): from = cursor
                case .failure(let error): return respond(Self.error(error))
                }
                var out = JSONWriter(capacity: 128)
                out.raw("{\"url\":")
                out.string(url.text)
                out.nextKey("state")
                out.string("active")
                out.nextKey("from")
                // The stored cursor: deliveries start after it (not the head now, which may have
                // moved while the row was written).
                out.integer(from)
                // Only a generated secret is answered: the caller knows one it gave.
                if given == nil {
                    out.nextKey("secret")
                    out.string(secret.text)
                }
                out.byte(UInt8(ascii: "}"))
                respond(.json(200, out.bytes))
            }
        }
    }

    /// `GET .../webhook`: `{"url","state","delivered","backlog","failures","lagMs"}` (never the secret).
    func getWebhook(_ call: Call, _ respond: @escaping Respond) {
        guard let webhooks = hub.webhooks else { return respond(Self.webhooksUnavailable) }
        let name = call.parameters["name"] ?? ""
        guard let summary = webhooks.summary(of: name) else { return respond(Self.noWebhook(name)) }
        var out = JSONWriter(capacity: 128)
        out.raw("{\"url\":")
        out.string(summary.url)
        out.nextKey("state")
        out.string(summary.state)
        out.nextKey("delivered")
        out.integer(summary.delivered)
        out.nextKey("backlog")
        out.integer(summary.backlog)
        out.nextKey("failures")
        out.integer(UInt64(summary.failures))
        out.nextKey("lagMs")
        out.integer(summary.lagMs)
        out.byte(UInt8(ascii: "}"))
        respond(.json(200, out.bytes))
    }

    /// `DELETE .../webhook`: 204, or 404 when none is set.
    func deleteWebhook(_ call: Call, _ respond: @escaping Respond) {
        guard let webhooks = hub.webhooks else { return respond(Self.webhooksUnavailable) }
        let name = call.parameters["name"] ?? ""
        webhooks.remove(name) { result in
            switch result {
            case .success(true): respond(HTTPResponse(status: 204))
            case .success(false): respond(Self.noWebhook(name))
            case .failure(let error): respond(Self.error(error))
            }
        }
    }

    /// `POST .../webhook/resume`: a paused webhook goes on from the session's next change (what
    /// it missed stays readable with `GET .../events`).
    func resumeWebhook(_ call: Call, _ respond: @escaping Respond) {
        guard let webhooks = hub.webhooks else { return respond(Self.webhooksUnavailable) }
        let name = call.parameters["name"] ?? ""
        withSession(call, respond) { session in
            switch webhooks.resume(name, head: session.core.committed.seq) {
            case .notFound: respond(Self.noWebhook(name))
            case .notPaused: respond(HTTPRouter.error(409, "webhook_not_paused", "session \(name)'s webhook is not paused: it delivers every change"))
            case .resumed: self.getWebhook(call, respond)
            }
        }
    }

    /// With `--redis` several nodes apply a session's changes and none owns its deliveries
    /// (ordered, once, across node failures): refused rather than sent by every node.
    static var webhooksUnavailable: HTTPResponse {
        HTTPRouter.error(
            501, "webhooks_unavailable",
            "webhooks need sessions this node stores itself (SQLite or --memory); with --redis, no node alone delivers a shared session's changes")
    }

    static func noWebhook(_ session: String) -> HTTPResponse {
        HTTPRouter.error(404, "webhook_not_found", "session \(session) has no webhook")
    }
}
