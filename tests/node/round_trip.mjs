// A tool-calling loop written as openai-node's README writes it: each returned message is
// pushed onto `messages` as it came. Usage: node round_trip.mjs BASE_URL MODEL
// Prints the finish reason of each turn as a JSON array; any error exits non-zero.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "client-key", maxRetries: 0 });
const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: {
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
      },
    },
  },
];
const messages = [{ role: "user", content: "Weather in Paris, then Oslo?" }];
const finishes = [];
for (let turn = 0; turn < 3; turn++) {
  const completion = await client.chat.completions.create({ model, messages, tools });
  const choice = completion.choices[0];
  finishes.push(choice.finish_reason);
  messages.push(choice.message);
  for (const call of choice.message.tool_calls ?? []) {
    const { city } = JSON.parse(call.function.arguments);
    messages.push({ role: "tool", tool_call_id: call.id, content: `sun in ${city}` });
  }
}
messages.push({ role: "user", content: "Thanks, and tomorrow?" });
const last = await client.chat.completions.create({ model, messages });
finishes.push(last.choices[0].finish_reason);
console.log(JSON.stringify(finishes));
