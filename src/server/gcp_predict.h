#pragma once
// Vertex AI's custom-container prediction protocol, as llama-server serves it with
// AIP_MODE=PREDICTION: POST AIP_PREDICT_ROUTE (default /predict) takes {"instances": [...]},
// each instance a request body of another route named by its "@requestFormat" (the route's
// path in camelCase without /v1, e.g. "chatCompletions", or the path itself), runs them
// together through the router (auth, limits and access log as if sent alone; never streamed)
// and answers {"predictions": [...]} with each route's JSON answer, errors included, in order.
// AIP_HEALTH_ROUTE, when set, answers as /health.
//
// Threading: the handler runs on a worker and returns at once; the instances' answers arrive
// on workers and the last one sends the response.

#include <string>

#include "core/status.h"

namespace ferrox {

class Router;

struct GcpPredictOptions {
    std::string predict_route;  // empty: off
    std::string health_route;   // empty: none beyond /health
};

// Must be called after every other route is added: the "@requestFormat" names are the POST
// routes' at that moment. kInvalidArgument when the predict route is one of them.
Status add_gcp_predict_routes(Router& router, const GcpPredictOptions& opts);

// "/v1/chat/completions" -> "chatCompletions", "/apply-template" -> "applyTemplate".
std::string gcp_request_format(const std::string& path);

}  // namespace ferrox
