<?php
/**
 * The README's calls, made as nr-llm would make them: through the PHP client that openapi-generator
 * generates from /v1/openapi.json (namespace A2aPush\Client), with Debian's Guzzle. Run by
 * `npm run test:clients` (scripts/clients.ts) against the running service; any PHP error, warning,
 * notice, deprecation or exception ends it with a non-zero exit.
 *
 * Environment: A2A_PUSH_URL (the api), A2A_PUSH_API_KEY, A2A_PUSH_CLIENT_LIB (the generated client's
 * lib/ folder), RECEIVER_URL (an HTTPS push receiver that answers 200), AGENT_URL (an A2A agent whose
 * task rt-1 is TASK_STATE_COMPLETED), AGENT_TOKEN (the bearer token the agent wants).
 */
declare(strict_types=1);

use A2aPush\Client\ApiException;
use A2aPush\Client\Api\AuditApi;
use A2aPush\Client\Api\DeliveriesApi;
use A2aPush\Client\Api\EventsApi;
use A2aPush\Client\Api\PushConfigsApi;
use A2aPush\Client\Api\RegistrationsApi;
use A2aPush\Client\Api\ResolutionsApi;
use A2aPush\Client\Configuration;
use A2aPush\Client\Model;

set_error_handler(static function (int $no, string $message, string $file, int $line): bool {
    throw new ErrorException($message, 0, $no, $file, $line);
});

function env(string $name): string
{
    $v = getenv($name);
    if ($v === false || $v === '') {
        throw new RuntimeException("$name is not set");
    }
    return $v;
}

// Debian's php-guzzlehttp-guzzle (it loads psr7, promises and the PSR interfaces), and the client.
require_once 'GuzzleHttp/autoload.php';
$lib = env('A2A_PUSH_CLIENT_LIB');
spl_autoload_register(static function (string $class) use ($lib): void {
    $prefix = 'A2aPush\\Client\\';
    if (str_starts_with($class, $prefix)) {
        require $lib . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    }
});

$steps = 0;
function step(string $what, bool $ok, string $detail = ''): void
{
    global $steps;
    if (!$ok) {
        throw new RuntimeException("step failed: $what" . ($detail !== '' ? " ($detail)" : ''));
    }
    $steps++;
    echo "ok $steps - $what\n";
}

/** The typed Problem of an ApiException (a problem+json answer). */
function problemOf(callable $call): array
{
    try {
        $call();
    } catch (ApiException $e) {
        $p = $e->getResponseObject();
        if (!$p instanceof Model\Problem) {
            throw new RuntimeException('expected a Problem, got ' . get_debug_type($p) . ': ' . $e->getMessage());
        }
        return [$e->getCode(), $p];
    }
    throw new RuntimeException('expected an ApiException');
}

$config = Configuration::getDefaultConfiguration()
    ->setHost(env('A2A_PUSH_URL'))
    ->setAccessToken(env('A2A_PUSH_API_KEY'));
$http = new GuzzleHttp\Client(['timeout' => 60]);
$pushConfigs = new PushConfigsApi($http, $config);
$events = new EventsApi($http, $config);
$deliveries = new DeliveriesApi($http, $config);
$registrations = new RegistrationsApi($http, $config);
$resolutions = new ResolutionsApi($http, $config);
$audit = new AuditApi($http, $config);
$receiver = env('RECEIVER_URL');
$task = 'task-' . bin2hex(random_bytes(4));

/** The cursor at the end of a feed (resolutions or audit) now: the walk-through reads what follows. */
function endOf(callable $read): string
{
    $cursor = '0';
    while (true) {
        $page = $read($cursor);
        if ($page->getItems() === []) {
            return $cursor;
        }
        $cursor = $page->getNextCursor();
    }
}

try {
    $feedStart = endOf(fn (string $after) => $resolutions->readResolutions($after, 1000, 0));
    $auditStart = endOf(fn (string $after) => $audit->readAudit($after, 1000));

    // 1. A push config, as nr-llm forwards CreateTaskPushNotificationConfig: the credential is masked.
    $created = $pushConfigs->createPushConfig($task, new Model\CreatePushConfig([
        'id' => 'nr-llm-1',
        'url' => $receiver,
        'token' => 'client-token',
        'authentication' => new Model\AuthenticationInfo(['scheme' => 'Bearer', 'credentials' => 's3cret-credential']),
    ]));
    step(
        'createPushConfig: 201 PushConfig, credential masked',
        $created instanceof Model\PushConfig && $created->getId() === 'nr-llm-1' && $created->getStatus() === 'active'
            && $created->getAuthentication()->getCredentials() === '********' && $created->getToken() === 'client-token'
            && $created->getCreatedAt() instanceof DateTime,
    );
    $again = $pushConfigs->getPushConfig($task, 'nr-llm-1');
    step('getPushConfig: the same config', $again->getUrl() === $receiver
        && $again->getCreatedAt() == $created->getCreatedAt());

    // 2. A task event with an Idempotency-Key: one delivery per active config.
    $event = new Model\TaskEvent(['stream_response' => new Model\StreamResponse([
        'status_update' => ['taskId' => $task, 'status' => ['state' => 'TASK_STATE_COMPLETED']],
    ])]);
    [$accepted, $status] = $events->writeTaskEventWithHttpInfo($task, $event, "evt-$task");
    $deliveryRefs = $accepted->getDeliveries();
    step(
        'writeTaskEvent: 202 TaskEventAccepted with one DeliveryRef',
        $status === 202 && $accepted instanceof Model\TaskEventAccepted && count($deliveryRefs) === 1
            && $deliveryRefs[0] instanceof Model\DeliveryRef && $deliveryRefs[0]->getConfigId() === 'nr-llm-1',
    );
    [$replayed, $status, $headers] = $events->writeTaskEventWithHttpInfo($task, $event, "evt-$task");
    step(
        'writeTaskEvent again with the key: the stored answer, Idempotent-Replayed',
        $status === 202 && $replayed->getEventId() === $accepted->getEventId()
            && ($headers['Idempotent-Replayed'][0] ?? $headers['idempotent-replayed'][0] ?? '') === 'true',
    );

    // 3. The delivery: delivered, with typed attempts.
    $id = $deliveryRefs[0]->getId();
    $until = microtime(true) + 30;
    do {
        $delivery = $deliveries->getDelivery($id);
        if ($delivery->getStatus() === 'delivered') {
            break;
        }
        usleep(200_000);
    } while (microtime(true) < $until);
    $attempts = $delivery->getAttempts();
    step(
        'getDelivery: delivered, one Attempt (outcome delivered, HTTP 200)',
        $delivery instanceof Model\Delivery && $delivery->getStatus() === 'delivered' && $delivery->getReason() === 'http_200'
            && count($attempts) === 1 && $attempts[0] instanceof Model\Attempt && $attempts[0]->getOutcome() === 'delivered'
            && $attempts[0]->getHttpStatus() === 200 && $attempts[0]->getStartedAt() instanceof DateTime
            && $delivery->getFinishedAt() instanceof DateTime,
        "status {$delivery->getStatus()}",
    );
    $page = $deliveries->listConfigDeliveries($task, 'nr-llm-1');
    step('listConfigDeliveries: a DeliveryPage with it', $page instanceof Model\DeliveryPage
        && count($page->getDeliveries()) === 1 && $page->getDeliveries()[0]->getId() === $id
        && $page->getNextPageToken() === null);
    [$code, $problem] = problemOf(fn () => $deliveries->retryDelivery($id));
    step('retryDelivery of a delivered one: 409, a typed Problem', $code === 409
        && $problem->getType() === 'urn:a2a-push:problem:conflict' && $problem->getStatus() === 409);

    // 4. Both lists, and paging through a list of more than one page.
    $mine = $pushConfigs->listPushConfigs($task);
    step('listPushConfigs: a PushConfigPage of one', $mine instanceof Model\PushConfigPage
        && count($mine->getConfigs()) === 1 && $mine->getConfigs()[0]->getId() === 'nr-llm-1');
    $tenant = $pushConfigs->listTenantPushConfigs(50, '0', 'active');
    step('listTenantPushConfigs (status active): it is there', in_array(
        'nr-llm-1',
        array_map(fn (Model\PushConfig $c) => $c->getId(), $tenant->getConfigs()),
        true,
    ));
    $paged = 'paged-' . bin2hex(random_bytes(4));
    $made = [];
    foreach (['a', 'b', 'c', 'd', 'e'] as $n) {
        $made[] = $pushConfigs->createPushConfig($paged, new Model\CreatePushConfig(['id' => $n, 'url' => $receiver]))->getId();
    }
    $seen = [];
    $pages = 0;
    $token = '0';
    do {
        $p = $pushConfigs->listPushConfigs($paged, 2, $token);
        $pages++;
        foreach ($p->getConfigs() as $c) {
            $seen[] = $c->getId();
        }
        $token = $p->getNextPageToken();
    } while ($token !== null);
    step('listPushConfigs, pageSize 2: 3 pages, every config once, oldest first', $pages === 3 && $seen === $made,
        json_encode($seen));

    // 5. problem+json answers, read back as the typed Problem.
    [$code, $problem] = problemOf(fn () => $pushConfigs->createPushConfig(
        $task,
        new Model\CreatePushConfig(['url' => 'https://metadata.google.internal/hook']),
    ));
    $errors = $problem->getErrors();
    step(
        'createPushConfig to a forbidden host: 400 Problem guard_refused with its rule and a FieldError',
        $code === 400 && $problem->getType() === 'urn:a2a-push:problem:guard_refused'
            && $problem->getRule() === 'forbidden_host' && $errors[0] instanceof Model\FieldError && $errors[0]->getPath() === 'url',
    );
    [$code, $problem] = problemOf(fn () => $pushConfigs->getPushConfig($task, 'absent'));
    step('getPushConfig of an absent config: 404 Problem not_found', $code === 404
        && $problem->getType() === 'urn:a2a-push:problem:not_found');
    [$code, $problem] = problemOf(fn () => $deliveries->getDelivery('00000000-0000-4000-8000-000000000000'));
    step('getDelivery of an unknown id: 404 Problem not_found', $code === 404 && $problem->getStatus() === 404);

    // 6. A registration (embedded): the config to embed, then the acknowledged task, then its resolution.
    $reg = $registrations->createRegistration(new Model\CreateRegistration([
        'mode' => 'embedded',
        'agent' => new Model\Agent(['url' => env('AGENT_URL'), 'bearer_token' => env('AGENT_TOKEN')]),
    ]));
    $embed = $reg->getPushNotificationConfig();
    step(
        'createRegistration: 201 RegistrationCreated, pending, with the CallbackPushConfig to embed',
        $reg instanceof Model\RegistrationCreated && $reg->getStatus() === 'pending' && $reg->getPushEnabled() === true
            && $embed instanceof Model\CallbackPushConfig && $embed->getId() === $reg->getId()
            && $embed->getAuthentication()->getCredentials() !== '********',
    );
    $read = $registrations->getRegistration($reg->getId());
    step('getRegistration: a Registration with CallbackCounts', $read instanceof Model\Registration
        && $read->getStatus() === 'pending' && $read->getCallbacks() instanceof Model\CallbackCounts
        && $read->getAgent()->getUrl() === env('AGENT_URL'));
    $active = $registrations->postRemoteTask($reg->getId(), new Model\RemoteTask(['remote_task_id' => 'rt-1']));
    step('postRemoteTask: active, remote task rt-1', $active->getStatus() === 'active'
        && $active->getRemoteTaskId() === 'rt-1');

    // The agent answers that GetTask (COMPLETED) only after a while: the long-poll waits for it.
    $t0 = microtime(true);
    $feed = $resolutions->readResolutions($feedStart, 100, 20);
    $took = microtime(true) - $t0;
    $items = $feed->getItems();
    step(
        sprintf('readResolutions (wait 20): the terminal Resolution, in %.1f s', $took),
        $feed instanceof Model\ResolutionPage && count($items) === 1 && $items[0] instanceof Model\Resolution
            && $items[0]->getRegistrationId() === $reg->getId() && $items[0]->getState() === 'TASK_STATE_COMPLETED'
            && $items[0]->getTerminal() === true && $took < 20,
    );
    $t0 = microtime(true);
    $empty = $resolutions->readResolutions($feed->getNextCursor(), 100, 2);
    $took = microtime(true) - $t0;
    step(
        sprintf('readResolutions after it (wait 2): empty, nextCursor unchanged, in %.1f s', $took),
        $empty->getItems() === [] && $empty->getNextCursor() === $feed->getNextCursor() && $took >= 1.9 && $took < 5,
    );
    step('getRegistration: resolved', $registrations->getRegistration($reg->getId())->getStatus() === 'resolved');

    // 7. The audit rows, paged with their cursor.
    $actions = [];
    $after = $auditStart;
    $pages = 0;
    while (true) {
        $rows = $audit->readAudit($after, 3);
        if ($rows->getItems() === []) {
            break;
        }
        $pages++;
        foreach ($rows->getItems() as $item) {
            $actions[] = $item->getAction() . ' ' . $item->getObjectId();
            if (!$item instanceof Model\AuditItem || !$item->getAt() instanceof DateTime) {
                throw new RuntimeException('an audit item is not a typed AuditItem');
            }
        }
        $after = $rows->getNextCursor();
    }
    step(
        "readAudit, limit 3: $pages pages with the config and the registration",
        $pages > 1 && in_array("push_config.created $task/nr-llm-1", $actions, true)
            && in_array('registration.created ' . $reg->getId(), $actions, true),
    );

    // 8. Delete: 204, then 404 (config) and `deleted` (registration).
    [, $status] = $pushConfigs->deletePushConfigWithHttpInfo($task, 'nr-llm-1');
    [$code] = problemOf(fn () => $pushConfigs->getPushConfig($task, 'nr-llm-1'));
    step('deletePushConfig: 204, then getPushConfig 404', $status === 204 && $code === 404);
    [, $status] = $registrations->deleteRegistrationWithHttpInfo($reg->getId());
    step('deleteRegistration: 204, then getRegistration shows deleted', $status === 204
        && $registrations->getRegistration($reg->getId())->getStatus() === 'deleted');
} catch (Throwable $e) {
    fwrite(STDERR, 'not ok ' . ($steps + 1) . ' - ' . get_class($e) . ': ' . $e->getMessage() . "\n");
    if ($e instanceof ApiException) {
        fwrite(STDERR, 'response: ' . $e->getResponseBody() . "\n");
    }
    fwrite(STDERR, $e->getTraceAsString() . "\n");
    echo "walkthrough: $steps passed, 1 failed\n";
    exit(1);
}
echo "walkthrough: $steps passed, 0 failed\n";
